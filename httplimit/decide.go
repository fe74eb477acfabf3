package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden"
)

// outcome is what decide found for one request; Handler and Check write
// it, Decide exports it as a Verdict.
type outcome struct {
	limited  bool // a rule applied
	proceed  bool // pass the request on
	canceled bool // the caller went away while the store was asked
	shadow   bool // over the limit, passed in shadow mode
	err      error
	ru       *rule
	pl       *plan
	key      string
	cost     int64
	allowed  bool
	rated    bool                    // the rate limits decided (they are not asked when the in-flight cap denies)
	resv     *ratewarden.Reservation // WithCountIf: the rate limits' reservation
	permit   *ratewarden.Permit      // WithMaxInFlight: the request's permit, acquired or not
	inflight InFlight
	one      [1]ratewarden.Result // the result of a single-limit check
	multi    []ratewarden.Result  // the results of a multi-limit check
	own      []ratewarden.Result  // the results on the heap, for Info: set by overLimit and verdict
}

// decision is the store's decision. Its Results may point into o (a
// single limit), so that the common case does not allocate: it must not
// outlive o.
func (o *outcome) decision() ratewarden.Decision {
	switch {
	case o.multi != nil:
		return ratewarden.Decision{Allowed: o.allowed, Results: o.multi}
	case !o.rated:
		return ratewarden.Decision{Allowed: o.allowed}
	}
	return ratewarden.Decision{Allowed: o.allowed, Results: o.one[:]}
}

func (o *outcome) rejected() bool {
	return o.limited && o.err == nil && !o.allowed && !o.shadow
}

func (o *outcome) info() Info {
	if !o.limited || o.pl == nil {
		return Info{}
	}
	d := ratewarden.Decision{Allowed: o.allowed, Results: o.own}
	return Info{Rule: o.ru.Name, Plan: o.pl.name, Key: o.key, Cost: o.cost, Policies: o.pl.policies, Decision: d, Shadow: o.shadow, InFlight: o.inflight}
}

// decide makes the middleware's decision on r: with byKey, for the client
// key ck instead of the key function's.
func (m *Middleware) decide(r *http.Request, ck string, byKey bool) (o outcome) {
	o.proceed = true
	if m.skip(r) {
		return o
	}
	ru := m.match(r)
	if ru == nil {
		return o
	}
	o.limited, o.ru, o.proceed = true, ru, false
	if o.err = m.prepare(r, &o, ck, byKey); o.err != nil {
		return o
	}
	if m.maxInFlight > 0 && !m.acquire(r, &o) {
		return o
	}
	err := m.rateCheck(r, &o)
	switch ratewarden.Classify(r.Context(), err) {
	case ratewarden.InvalidInput:
		o.err = err
	case ratewarden.CallerCanceled:
		o.err, o.canceled = err, true
	case ratewarden.StoreUnavailable, ratewarden.KeyState:
		o.err = err
		o.proceed = m.storeFailed(r, o.key, err)
	default:
		o.rated = true
		if o.proceed = o.allowed && !o.inflight.Denied(); !o.proceed {
			m.overLimit(r, &o)
		}
	}
	if !o.proceed {
		m.drop(r, &o)
	}
	return o
}

// prepare finds r's client key (unless byKey gives it as ck), plan and
// cost, and sets o.key.
func (m *Middleware) prepare(r *http.Request, o *outcome, ck string, byKey bool) error {
	var err error
	switch {
	case byKey && ck == "":
		return fmt.Errorf("httplimit: Check: key must not be empty: %w", ratewarden.ErrInvalidKey)
	case !byKey:
		if m.ip != nil {
			m.checkProxy(r)
		}
		if ck, err = m.key(r); err == nil && ck == "" {
			err = fmt.Errorf("httplimit: key function returned an empty key: %w", ratewarden.ErrInvalidKey)
		}
		if err != nil {
			return err
		}
	}
	if o.pl, err = planOf(o.ru, r); err != nil {
		return err
	}
	if o.cost, err = m.cost(r); err != nil {
		if !errors.Is(err, ratewarden.ErrInvalidCost) {
			err = fmt.Errorf("httplimit: cost function: %w: %w", err, ratewarden.ErrInvalidCost)
		}
		return err
	}
	o.key = o.pl.prefix + ck
	return nil
}

// rateCheck checks the plan's limits in one atomic step: a reservation
// under WithCountIf, else an outright check.
func (m *Middleware) rateCheck(r *http.Request, o *outcome) error {
	var err error
	switch {
	case m.countIf != nil:
		o.resv, err = m.lim.Reserve(r.Context(), o.key, o.cost, o.pl.limits...)
		if err == nil {
			o.allowed, o.multi = o.resv.Allowed, o.resv.Results
		}
	case len(o.pl.limits) == 1:
		// The same atomic check; AllowN does not allocate.
		o.one[0], err = m.lim.AllowN(r.Context(), o.key, o.pl.limits[0], o.cost)
		o.allowed = o.one[0].Allowed
	default:
		var d ratewarden.Decision
		d, err = m.lim.AllowAll(r.Context(), o.key, o.cost, o.pl.limits...)
		o.allowed, o.multi = d.Allowed, d.Results
	}
	return err
}

// overLimit reports a request over the limit (WithOnLimit, and the shadow
// mode's log) and lets it pass in shadow mode.
func (m *Middleware) overLimit(r *http.Request, o *outcome) {
	// Results may live on the caller's stack frame: the handlers get their
	// own copy (kept apart from o.d, so that o.d does not escape).
	o.own = append([]ratewarden.Result(nil), o.decision().Results...)
	o.shadow = m.shadow
	if m.onLimit != nil {
		m.onLimit(r, o.info())
	}
	if !m.shadow {
		return
	}
	if n, ok := m.shadowLog.take(time.Now()); ok {
		attrs := []slog.Attr{slog.String("rule", o.ru.Name), slog.String("key", o.key)}
		if !o.allowed {
			attrs = append(attrs, slog.String("policy", bindingName(o.pl, o.decision())))
		}
		if o.inflight.Denied() {
			attrs = append(attrs, slog.Int64("max_in_flight", o.inflight.Max))
		}
		m.log.LogAttrs(r.Context(), slog.LevelInfo, "httplimit: shadow mode: request over the limit passed", append(attrs, slog.Int64("requests", n))...)
	}
	o.proceed = true
}

// planOf returns the plan of ru that limits r.
func planOf(ru *rule, r *http.Request) (*plan, error) {
	if ru.PlanFunc == nil {
		return ru.plans[0], nil
	}
	name, err := ru.PlanFunc(r)
	if err != nil {
		if isKeyError(err) || errors.Is(err, ratewarden.ErrInvalidConfig) {
			return nil, err
		}
		return nil, fmt.Errorf("httplimit: rule %q: plan function: %w: %w", ru.Name, err, ratewarden.ErrInvalidConfig)
	}
	if p := ru.byName[name]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("httplimit: rule %q: plan function returned %q, which is none of the rule's plans: %w", ru.Name, truncate(name, 64), ratewarden.ErrInvalidConfig)
}

// A Verdict is the middleware's decision on one request, made by Decide
// or DecideKey without writing a response: adapters to other frameworks
// (ratewarden's gin, echo, fiber and gRPC adapters) answer it in their
// framework's terms, with the same headers as Handler.
type Verdict struct {
	// Limited reports whether a rule applied. When false (the request was
	// skipped or matched no rule) Proceed is true and nothing else is set.
	Limited bool
	// Proceed reports whether to pass the request on: it was allowed,
	// passed over the limit in shadow mode, or passed although the store
	// failed (fail open: Err is set then).
	Proceed bool
	// Canceled reports that the request's context ended while the store
	// was asked: nobody waits for an answer.
	Canceled bool
	// Err is why the request could not be decided: it wraps
	// ratewarden.ErrInvalidKey (no key), ErrInvalidCost, ErrInvalidConfig
	// (a plan function's failure) or, from the store, ErrStoreUnavailable.
	// With Proceed false, answer it as ErrorProblem does. Its text is for
	// logs, not for clients.
	Err error
	// Info describes the decision when the store made one (Err nil).
	Info Info

	render *Renderer
	hold   *hold // WithCountIf's reservation, WithMaxInFlight's permit
}

// Done tells the middleware that the request a Verdict let proceed has
// been served, with status as the response's status: under WithCountIf
// its reservation is settled (kept when the CountFunc counts status,
// given back otherwise), under WithMaxInFlight its permit is released.
// Pass 0 when the outcome is unknown (the handler panicked): the request
// then counts. Without those options, or for a Verdict that does not
// proceed, Done does nothing; call it all the same, once, when the
// request ends. Until then a permit is extended as Handler extends it,
// but no longer once the request's context is done, and not at all when
// that context can never be done (context.Background): a Verdict never
// Done keeps its permit for ttl after its context ended (or after it was
// acquired), and its reservation counts.
func (v Verdict) Done(status int) {
	v.hold.finish(status)
}

// DoneAfter calls Done(0) once ctx is done, and at once when ctx can
// never be done (context.Background): for a Verdict whose request ends
// out of the caller's sight (a check made inside a handler the caller
// does not wrap), so that its permit is released when the request's
// context ends rather than ttl later. Status 0 counts the reservation.
// It does nothing for a Verdict that holds nothing.
func (v Verdict) DoneAfter(ctx context.Context) {
	switch {
	case v.hold == nil:
	case ctx.Done() == nil:
		v.hold.finish(0)
	default:
		context.AfterFunc(ctx, func() { v.hold.finish(0) })
	}
}

// Rejected reports whether the request is denied for being over the
// limit: answer it as ProblemDenied does, after the headers.
func (v Verdict) Rejected() bool {
	return v.Limited && v.Err == nil && !v.Proceed && !v.Canceled
}

// SetHeaders sets the rate limit headers of the decision on h, Retry-After
// included when it is rejected, exactly as Handler sets them. It sets
// nothing when there was no decision (Err, or not Limited).
func (v Verdict) SetHeaders(h http.Header) {
	if v.render != nil {
		setHeaders(h, v.render, v.Info.Decision, v.Rejected(), v.Info.Key, v.Info.InFlight)
	}
}

// setHeaders sets the headers of a decision on h: the rate limit headers,
// or Retry-After alone for a request denied over the in-flight cap, which
// the rate limits did not decide.
func setHeaders(h http.Header, render *Renderer, d ratewarden.Decision, rejected bool, key string, f InFlight) {
	if rejected && f.Denied() {
		h[nameRetryAfter] = []string{itoa(inFlightRetry(f))}
		return
	}
	render.SetKey(h, d, rejected, key)
}

// inFlightRetry is Retry-After for a request over the in-flight cap, in
// whole seconds rounded up, at least 1.
func inFlightRetry(f InFlight) int64 { return max(ceilSeconds(f.RetryAfter), 1) }

// AppendFields appends the header fields SetHeaders sets to dst, in
// Renderer order (for gRPC metadata, in lower case).
func (v Verdict) AppendFields(dst []Field) []Field {
	switch {
	case v.render == nil:
		return dst
	case v.Rejected() && v.Info.InFlight.Denied():
		return append(dst, Field{nameRetryAfter, itoa(inFlightRetry(v.Info.InFlight))})
	}
	return v.render.AppendKey(dst, v.Info.Decision, v.Rejected(), v.Info.Key)
}

// Decide makes the decision Handler makes for r, with all its effects
// (counting, WithOnLimit, logging, the proxy checks), and returns it
// instead of writing a response.
//
// Under WithCountIf and WithMaxInFlight a Verdict that proceeds holds the
// request's reservation and permit: call Verdict.Done when the request
// has been served.
func (m *Middleware) Decide(r *http.Request) Verdict {
	return m.verdict(r, m.decide(r, "", false))
}

// DecideKey is Decide for the client key key instead of the key
// function's: the decision Check makes.
// Call Verdict.Done when the request has been served, as for Decide.
func (m *Middleware) DecideKey(r *http.Request, key string) Verdict {
	return m.verdict(r, m.decide(r, key, true))
}

func (m *Middleware) verdict(r *http.Request, o outcome) Verdict {
	v := Verdict{Limited: o.limited, Proceed: o.proceed, Canceled: o.canceled, Err: o.err}
	if o.holds() {
		v.hold = m.hold(r, &o, true)
	}
	if o.limited && o.err == nil {
		if o.own == nil { // a denial's Results are copied already
			o.own = append([]ratewarden.Result(nil), o.decision().Results...)
		}
		v.Info, v.render = o.info(), o.pl.render
	}
	return v
}
