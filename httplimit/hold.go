package httplimit

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit/internal/statuswriter"
)

// hold is what an admitted request holds while it is served, under
// WithCountIf (its reservation, settled by its outcome) and
// WithMaxInFlight (its permit, kept alive by an extender and released).
type hold struct {
	m      *Middleware
	r      *http.Request
	key    string
	resv   *ratewarden.Reservation // admitted; nil when none is held
	permit *ratewarden.Permit      // acquired; nil when none is held
	ext    *extender
	done   atomic.Bool
}

// holds reports whether o passes the request on holding a reservation or
// a permit, which hold then takes over.
func (o *outcome) holds() bool {
	return o.proceed && ((o.resv != nil && o.resv.Allowed) || (o.permit != nil && o.permit.Acquired))
}

// take makes h hold what o holds: its reservation when admitted, its
// permit when acquired.
func (h *hold) take(o *outcome) {
	if o.resv != nil && o.resv.Allowed {
		h.resv = o.resv
	}
	if o.permit != nil && o.permit.Acquired {
		h.permit = o.permit
	}
}

// hold takes over what o holds for r. The permit is extended until
// finish, and with a Verdict's (byVerdict) no longer once r's context is
// done; not at all when that context can never be done, so that a
// Verdict nobody ends keeps its permit ttl at most.
func (m *Middleware) hold(r *http.Request, o *outcome, byVerdict bool) *hold {
	h := &hold{m: m, r: r, key: o.key}
	h.take(o)
	if h.permit != nil {
		switch {
		case !byVerdict:
			h.startExtender(context.Background()) // until finish
		case r.Context().Done() != nil:
			h.startExtender(r.Context())
		}
	}
	return h
}

// finish ends what h holds: the reservation is kept when the request
// counts (status 0 stands for a handler that did not return, which
// counts) and given back otherwise, then the permit is released. Only the
// first call does anything; a nil h is nothing to end.
func (h *hold) finish(status int) {
	if h == nil || h.done.Swap(true) {
		return
	}
	if h.ext != nil {
		h.ext.stop()
	}
	defer h.release() // also when the CountFunc panics
	if h.resv != nil && status != 0 && !h.m.countIf(h.r, status) {
		h.giveBack("give back the units of a request that does not count (it stays counted)")
	}
}

// giveBack cancels h's reservation; what says what failed, for the log.
func (h *hold) giveBack(what string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.r.Context()), finishTimeout)
	defer cancel()
	if _, err := h.resv.Cancel(ctx); err != nil {
		h.m.afterFailed(h.r, h.key, what, err)
	}
}

func (h *hold) release() {
	if h.permit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.r.Context()), finishTimeout)
	defer cancel()
	if err := h.permit.Release(ctx); err != nil {
		h.m.afterFailed(h.r, h.key, "release the permit of a request in flight (it stays held until its ttl)", err)
	}
}

// drop gives back what o holds for a request that does not proceed: the
// permit it took before the rate limits denied it, say.
func (m *Middleware) drop(r *http.Request, o *outcome) {
	if o.resv == nil && o.permit == nil {
		return
	}
	h := hold{m: m, r: r, key: o.key}
	h.take(o)
	if h.resv != nil {
		// Nothing was served: give the units back, whatever the CountFunc.
		h.giveBack("give back the units of a request that was not served (it stays counted)")
	}
	h.release()
}

// serve runs next for a request that holds a reservation or a permit,
// and ends them when next returns or panics; under WithCountIf next
// writes through a recorder, which sees the status.
func (m *Middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request, o *outcome) {
	h := m.hold(r, o, false)
	var rec *statuswriter.Recorder
	if h.resv != nil {
		w, rec = statuswriter.Wrap(w)
	}
	returned := false
	defer func() {
		// Without recover: a panic goes on, with its own stack.
		status := 0
		if returned {
			status = http.StatusOK
			if rec != nil {
				status = rec.Outcome()
			}
		}
		h.finish(status)
	}()
	next.ServeHTTP(w, r)
	returned = true
}
