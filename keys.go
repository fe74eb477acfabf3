package ratewarden

import (
	"context"
	"fmt"
	"strconv"
)

// KeyCheck is one key's part of a multi-key decision (Limiter.AllowKeys):
// Cost units against every one of Limits for Key, decided all-or-nothing
// in one store call, as AllowAll decides them.
type KeyCheck struct {
	Key    string
	Limits []Limit
	// Cost is the number of units; 0 consumes nothing and reports the
	// current state.
	Cost int64
	// Shadow makes the check advisory: it is decided, reported and, when
	// it admits and the whole is admitted, consumed, but its denial never
	// denies the whole. Use it to try a limit on live traffic.
	Shadow bool
	// Via decides the check on another Limiter: its Store (a store with a
	// different failure policy, say) and its Observer. Nil means the
	// Limiter AllowKeys is called on.
	Via *Limiter
}

// KeysDecision is the outcome of a multi-key check (Limiter.AllowKeys and
// PeekKeys).
type KeysDecision struct {
	// Allowed is true when every check that is not Shadow admitted.
	Allowed bool
	// Checks holds one Decision per KeyCheck, in the order given. Each
	// Decision's Allowed is that check's own verdict, a shadow check's
	// included.
	Checks []Decision
}

// AllowKeys decides several keys as one request: say "10 per second for
// this client and 1000 per minute for this route". Each KeyCheck is
// decided atomically on its own key, as AllowAll decides one; across keys
// the decision is all-or-nothing at best effort:
//
//   - Every check is validated first; bad input returns an error wrapping
//     ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost or ErrInvalidConfig
//     that names the check ("checks[2]: ...") and no store is called.
//   - With more than one check, at least one of them not Shadow, every
//     check is first peeked (one store call each, nothing consumed). When
//     a check that is not Shadow would be denied, the request is denied
//     and those peeks are the answer: nothing is consumed from any key.
//   - Otherwise every check is consumed in turn (one store call each). A
//     request racing in between can still deny a check at this step; the
//     checks before it stay consumed, the ones after it are not consumed
//     and report their peek, and Allowed is false. Exact per key, best
//     effort across keys.
//   - A single check (or only Shadow checks) is consumed directly: one
//     store call per check, no peek.
//
// Checks may name the same key; each is its own store call. Observers are
// told once per check, after the decision, by the Limiter that decided it
// (Via or this one), with the results reported for it. A store error stops
// the decision and is returned; see Classify. The failing check's observer
// is told of the error, and when it failed while consuming, the observers
// of the checks consumed before it are told of their results.
func (l *Limiter) AllowKeys(ctx context.Context, checks ...KeyCheck) (KeysDecision, error) {
	return l.keys(ctx, checks, false)
}

// PeekKeys reports the decision AllowKeys would make now, without
// consuming: every check is peeked, one store call each.
func (l *Limiter) PeekKeys(ctx context.Context, checks ...KeyCheck) (KeysDecision, error) {
	return l.keys(ctx, checks, true)
}

func (l *Limiter) keys(ctx context.Context, checks []KeyCheck, peek bool) (KeysDecision, error) {
	if err := validateChecks(checks); err != nil {
		return KeysDecision{}, err
	}
	d := newKeysDecision(checks)
	if peek || (len(checks) > 1 && anyEnforced(checks)) {
		if i, err := l.round(ctx, checks, d.Checks, true); err != nil {
			checks[i].limiter(l).notify(checks[i].Key, nil, err) // nothing was decided
			return KeysDecision{}, err
		}
		d.Allowed = enforcedAllowed(checks, d.Checks)
		if peek || !d.Allowed {
			l.notifyKeys(checks, d.Checks, len(checks), nil)
			return d, nil
		}
	}
	i, err := l.round(ctx, checks, d.Checks, false)
	l.notifyKeys(checks, d.Checks, i, err)
	if err != nil {
		return KeysDecision{}, err
	}
	d.Allowed = enforcedAllowed(checks, d.Checks)
	return d, nil
}

// round makes the store call of every check in turn, peeking or
// consuming. Consuming stops after a check that is not Shadow is denied.
// It returns the index of the failing check with its error, or
// len(checks).
func (l *Limiter) round(ctx context.Context, checks []KeyCheck, ds []Decision, peek bool) (int, error) {
	for i := range checks {
		c := &checks[i]
		if err := c.limiter(l).checkStore(ctx, c.Key, c.Limits, c.Cost, peek, ds[i].Results); err != nil {
			return i, err
		}
		ds[i].Allowed = allAllowed(ds[i].Results)
		if !peek && !c.Shadow && !ds[i].Allowed {
			return len(checks), nil
		}
	}
	return len(checks), nil
}

// notifyKeys tells each check's observer of its results, for the checks
// before failed, and of err for the check at failed (when err is not nil).
func (l *Limiter) notifyKeys(checks []KeyCheck, ds []Decision, failed int, err error) {
	for i := range checks {
		c := &checks[i]
		switch {
		case i < failed:
			c.limiter(l).notify(c.Key, ds[i].Results, nil)
		case i == failed && err != nil:
			c.limiter(l).notify(c.Key, nil, err)
		}
	}
}

func (c *KeyCheck) limiter(l *Limiter) *Limiter {
	if c.Via != nil {
		return c.Via
	}
	return l
}

// newKeysDecision makes the Decisions of checks, their Results in one
// array.
func newKeysDecision(checks []KeyCheck) KeysDecision {
	n := 0
	for i := range checks {
		n += len(checks[i].Limits)
	}
	res := make([]Result, n)
	d := KeysDecision{Checks: make([]Decision, len(checks))}
	for i := range checks {
		k := len(checks[i].Limits)
		d.Checks[i].Results, res = res[:k:k], res[k:]
	}
	return d
}

func anyEnforced(checks []KeyCheck) bool {
	for i := range checks {
		if !checks[i].Shadow {
			return true
		}
	}
	return false
}

// enforcedAllowed reports whether every check that is not Shadow admitted.
func enforcedAllowed(checks []KeyCheck, ds []Decision) bool {
	for i := range checks {
		if !checks[i].Shadow && !ds[i].Allowed {
			return false
		}
	}
	return true
}

func validateChecks(checks []KeyCheck) error {
	if len(checks) == 0 {
		return fmt.Errorf("ratewarden: no checks given: %w", ErrInvalidKey)
	}
	for i := range checks {
		c := &checks[i]
		if c.Via != nil && c.Via.store == nil {
			return fmt.Errorf("ratewarden: checks[%d]: Via is a Limiter not made by New: %w", i, ErrInvalidConfig)
		}
		if validateCheck("", c.Key, c.Limits, c.Cost) != nil {
			// Again, naming the check; only on failure, to keep valid
			// checks free of allocations.
			return validateCheck("checks["+strconv.Itoa(i)+"]: ", c.Key, c.Limits, c.Cost)
		}
	}
	return nil
}
