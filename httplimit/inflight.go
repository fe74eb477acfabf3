package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
)

// InFlight describes the permit a request asked for under
// WithMaxInFlight. It is the zero InFlight when the middleware caps no
// requests in flight, or the store failed and the request went on
// without a permit.
type InFlight struct {
	// Max is the cap, WithMaxInFlight's max.
	Max int64
	// Acquired reports whether the request got a permit. When false (and
	// Max > 0) Max requests of its key were in flight: the request was
	// denied, or passed in shadow mode.
	Acquired bool
	// Held is the number of requests of the key in flight right after the
	// request asked, itself included when Acquired.
	Held int64
	// RetryAfter is zero when Acquired; otherwise the time until the
	// soonest of the permits held would expire if nobody released or
	// extended it: between ttl/2 and ttl, as requests in flight extend
	// theirs every ttl/2. It errs late: a request that ends gives its
	// permit back at once, usually much sooner. Retry-After is this,
	// rounded up to whole seconds, at least 1.
	RetryAfter time.Duration
	// Source tells who decided; a failure policy (package fallback) gives
	// a degraded one (see ratewarden.Source.Degraded).
	Source ratewarden.Source
}

// Denied reports whether the request was over the cap: a permit was asked
// for and not acquired.
func (f InFlight) Denied() bool { return f.Max > 0 && !f.Acquired }

// acquire takes the request's permit (WithMaxInFlight) and reports
// whether to go on to the rate limits: not when the request is over the
// cap (outside shadow mode), nor when the store failed and the request is
// not to proceed (WithFailClosed).
func (m *Middleware) acquire(r *http.Request, o *outcome) bool {
	p, err := m.lim.Acquire(r.Context(), o.key, m.maxInFlight, m.inFlightTTL)
	switch ratewarden.Classify(r.Context(), err) {
	case ratewarden.InvalidInput:
		o.err = err
		return false
	case ratewarden.CallerCanceled:
		o.err, o.canceled = err, true
		return false
	case ratewarden.StoreUnavailable, ratewarden.KeyState:
		if m.storeFailed(r, o.key, err) {
			return true // fail open: on, without a permit
		}
		o.err = err
		return false
	}
	o.permit = p
	o.inflight = InFlight{Max: p.Max, Acquired: p.Acquired, Held: p.Held, RetryAfter: p.RetryAfter, Source: p.Source}
	if p.Acquired || m.shadow {
		return true // shadow mode reports the request once the rate limits are checked too
	}
	m.overLimit(r, o)
	return false
}

// finishTimeout bounds each store call the middleware makes for a request
// after its handler (or, for an extension, during it), on a context of
// its own: the client may be gone by then, and the call is still owed.
const finishTimeout = 5 * time.Second

// extender extends a permit every ttl/2 while its request is served, so a
// long request keeps it and a crashed replica's permits still expire
// ttl after its last extension. It runs on a timer, not a goroutine of
// its own: nothing is left running once stop returns.
type extender struct {
	h     *hold
	ttl   time.Duration
	until context.Context // extending stops when it is done too

	mu      sync.Mutex
	stopped bool
	t       *time.Timer
}

func (h *hold) startExtender(until context.Context) {
	e := &extender{h: h, ttl: h.m.inFlightTTL, until: until}
	e.mu.Lock()
	e.t = time.AfterFunc(e.ttl/2, e.fire)
	e.mu.Unlock()
	h.ext = e
}

// fire extends the permit and arms the next extension. Holding mu across
// the store call makes stop wait for it, so no extension follows stop.
func (e *extender) fire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || e.until.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.h.r.Context()), finishTimeout)
	err := e.h.permit.Extend(ctx, e.ttl)
	cancel()
	if err != nil {
		e.h.m.afterFailed(e.h.r, e.h.key, "extend the permit of a request in flight", err)
		if errors.Is(err, ratewarden.ErrPermitLost) {
			return // expired: it may be another request's by now
		}
	}
	e.t.Reset(e.ttl / 2)
}

func (e *extender) stop() {
	e.mu.Lock()
	e.stopped = true
	e.t.Stop()
	e.mu.Unlock()
}

// afterFailed logs a store call made for a request once its admission
// was decided (a settlement, a release, an extension) that failed: the
// request stays counted, or its permit held until its ttl. At most one
// line a second, with a count, as for store failures.
func (m *Middleware) afterFailed(r *http.Request, key, what string, err error) {
	if n, ok := m.afterLog.take(time.Now()); ok {
		m.log.LogAttrs(r.Context(), slog.LevelError, "httplimit: could not "+what,
			slog.String("key", key), slog.Int64("errors", n), slog.Any("error", err))
	}
}
