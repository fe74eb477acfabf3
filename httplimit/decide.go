package httplimit

import (
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
	one      [1]ratewarden.Result // the result of a single-limit check
	multi    []ratewarden.Result  // the results of a multi-limit check
	own      []ratewarden.Result  // the results on the heap, for Info: set by overLimit and verdict
}

// decision is the store's decision. Its Results may point into o (a
// single limit), so that the common case does not allocate: it must not
// outlive o.
func (o *outcome) decision() ratewarden.Decision {
	if o.multi != nil {
		return ratewarden.Decision{Allowed: o.allowed, Results: o.multi}
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
	return Info{Rule: o.ru.Name, Plan: o.pl.name, Key: o.key, Cost: o.cost, Policies: o.pl.policies, Decision: d, Shadow: o.shadow}
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
	var err error
	switch {
	case byKey && ck == "":
		err = fmt.Errorf("httplimit: Check: key must not be empty: %w", ratewarden.ErrInvalidKey)
	case !byKey:
		if m.ip != nil {
			m.checkProxy(r)
		}
		if ck, err = m.key(r); err == nil && ck == "" {
			err = fmt.Errorf("httplimit: key function returned an empty key: %w", ratewarden.ErrInvalidKey)
		}
	}
	if err != nil {
		o.err = err
		return o
	}
	if o.pl, o.err = planOf(ru, r); o.err != nil {
		return o
	}
	if o.cost, err = m.cost(r); err != nil {
		if !errors.Is(err, ratewarden.ErrInvalidCost) {
			err = fmt.Errorf("httplimit: cost function: %w: %w", err, ratewarden.ErrInvalidCost)
		}
		o.err = err
		return o
	}
	o.key = o.pl.prefix + ck
	if len(o.pl.limits) == 1 {
		// The same atomic check; AllowN does not allocate.
		o.one[0], err = m.lim.AllowN(r.Context(), o.key, o.pl.limits[0], o.cost)
		o.allowed = o.one[0].Allowed
	} else {
		var d ratewarden.Decision
		d, err = m.lim.AllowAll(r.Context(), o.key, o.cost, o.pl.limits...)
		o.allowed, o.multi = d.Allowed, d.Results
	}
	switch ratewarden.Classify(r.Context(), err) {
	case ratewarden.InvalidInput:
		o.err = err
		return o
	case ratewarden.CallerCanceled:
		o.err, o.canceled = err, true
		return o
	case ratewarden.StoreUnavailable, ratewarden.KeyState:
		o.err = err
		o.proceed = m.storeFailed(r, o.key, err)
		return o
	}
	if o.allowed {
		o.proceed = true
		return o
	}
	m.overLimit(r, &o)
	return o
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
		m.log.LogAttrs(r.Context(), slog.LevelInfo, "httplimit: shadow mode: request over the limit passed",
			slog.String("rule", o.ru.Name), slog.String("key", o.key), slog.String("policy", bindingName(o.pl, o.decision())), slog.Int64("requests", n))
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
		v.render.SetKey(h, v.Info.Decision, v.Rejected(), v.Info.Key)
	}
}

// AppendFields appends the header fields SetHeaders sets to dst, in
// Renderer order (for gRPC metadata, in lower case).
func (v Verdict) AppendFields(dst []Field) []Field {
	if v.render == nil {
		return dst
	}
	return v.render.AppendKey(dst, v.Info.Decision, v.Rejected(), v.Info.Key)
}

// Decide makes the decision Handler makes for r, with all its effects
// (counting, WithOnLimit, logging, the proxy checks), and returns it
// instead of writing a response.
func (m *Middleware) Decide(r *http.Request) Verdict {
	return m.verdict(m.decide(r, "", false))
}

// DecideKey is Decide for the client key key instead of the key
// function's: the decision Check makes.
func (m *Middleware) DecideKey(r *http.Request, key string) Verdict {
	return m.verdict(m.decide(r, key, true))
}

func (m *Middleware) verdict(o outcome) Verdict {
	v := Verdict{Limited: o.limited, Proceed: o.proceed, Canceled: o.canceled, Err: o.err}
	if o.limited && o.err == nil {
		if o.own == nil { // a denial's Results are copied already
			o.own = append([]ratewarden.Result(nil), o.decision().Results...)
		}
		v.Info, v.render = o.info(), o.pl.render
	}
	return v
}
