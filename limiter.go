package ratewarden

import (
	"context"
	"fmt"
	"sync"

	"github.com/ratewarden/ratewarden/internal/nilcheck"
)

// Limiter checks keys against limits on a Store. It validates every input
// before the store is called, so bad input never reaches Redis and changes
// no state. A Limiter is safe for concurrent use; make one per Store and
// share it.
type Limiter struct {
	store    Store
	single   SingleChecker // store's fast path for one limit, or nil
	observer Observer
	calls    sync.Pool // *call: keeps single-limit checks free of allocations
}

// call holds the request and result of one single-limit check, pooled so
// that handing them to the Store interface does not allocate per call.
type call struct {
	req Request
	lim [1]Limit
	res [1]Result
}

// New returns a Limiter deciding on store. A nil store, or one holding a
// nil pointer (as a failed constructor returns), is refused with
// ErrInvalidConfig rather than failing on the first check.
//
// A nil Option is refused with ErrInvalidConfig too.
func New(store Store, opts ...Option) (*Limiter, error) {
	if nilcheck.Is(store) {
		return nil, fmt.Errorf("ratewarden: store must not be nil%s: %w", nilcheck.Describe(store), ErrInvalidConfig)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{store: store, observer: c.observer}
	if sc, ok := store.(SingleChecker); ok && c.observer == nil { // an Observer takes a slice: the pooled path
		l.single = sc
	}
	l.calls.New = func() any { return new(call) }
	return l, nil
}

// Store returns the Store the Limiter decides on, for a caller that
// needs that store's own methods.
func (l *Limiter) Store() Store { return l.store }

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.check(ctx, key, limit, 1, false)
}

// AllowN reports whether n units may pass for key under limit now, and
// consumes them if so. A denied request consumes nothing. n = 0 consumes
// nothing and reports the current state. Over the limit is a Result with
// Allowed false, never an error; errors mean bad input (ErrInvalidKey,
// ErrInvalidLimit, ErrInvalidCost: the store is not called) or a store
// failure (ErrStoreUnavailable).
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	return l.check(ctx, key, limit, n, false)
}

// Peek reports the decision Allow would make now, without consuming.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.check(ctx, key, limit, 1, true)
}

func (l *Limiter) check(ctx context.Context, key string, limit Limit, n int64, peek bool) (Result, error) {
	// One test of the whole input first; the validators only for the
	// error, in their order.
	if key == "" || limit.fault() != valid || n < 0 || n > limit.Capacity() {
		if err := validateKey("", key); err != nil {
			return Result{}, err
		}
		if err := limit.Validate(); err != nil {
			return Result{}, err
		}
		if err := validateCost("", n, limit); err != nil {
			return Result{}, err
		}
	}
	if l.single != nil {
		return l.single.CheckOne(ctx, key, limit, n, peek)
	}
	c := l.calls.Get().(*call)
	c.lim[0] = limit
	c.req = Request{Key: key, Limits: c.lim[:], Cost: n, Peek: peek}
	err := l.store.Check(ctx, &c.req, c.res[:])
	if l.observer != nil {
		l.notify(key, c.res[:], err)
	}
	res := c.res[0]
	c.req.Key = "" // the one reference a pooled call must not keep
	l.calls.Put(c)
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// AllowAll checks n units for key against every one of limits in one atomic
// step (one round trip to Redis): the request is admitted, and consumed from
// every limit, only when all of them admit it; otherwise nothing is consumed
// from any. Use it for "10 per second and 1000 per day". The limits must
// differ in Scope (algorithm and period).
func (l *Limiter) AllowAll(ctx context.Context, key string, n int64, limits ...Limit) (Decision, error) {
	if err := validateCheck("", key, limits, n); err != nil {
		return Decision{}, err
	}
	res := make([]Result, len(limits))
	err := l.checkStore(ctx, key, limits, n, false, res)
	l.notify(key, res, err)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: allAllowed(res), Results: res}, nil
}

// checkStore makes one store call: n units against limits for key.
func (l *Limiter) checkStore(ctx context.Context, key string, limits []Limit, n int64, peek bool, res []Result) error {
	req := Request{Key: key, Limits: limits, Cost: n, Peek: peek}
	return l.store.Check(ctx, &req, res)
}

// notify tells the observer, if any, of one check: its results, or err.
func (l *Limiter) notify(key string, res []Result, err error) {
	switch {
	case l.observer == nil:
	case err != nil:
		l.observer(key, nil, err)
	default:
		l.observer(key, res, nil)
	}
}

func allAllowed(res []Result) bool {
	for _, r := range res {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// Reset clears the state of key under each of limits: the next check starts
// from a full allowance. Other keys, and other limits of key, keep theirs.
func (l *Limiter) Reset(ctx context.Context, key string, limits ...Limit) error {
	if err := validateKey("", key); err != nil {
		return err
	}
	if err := validateLimits("", limits); err != nil {
		return err
	}
	return l.store.Reset(ctx, key, limits...)
}

// The validators below name what is wrong after "ratewarden: " and where,
// a prefix such as "checks[2]: " (empty for a single check), and wrap the
// sentinel of the field.

func validateKey(where, key string) error {
	if key == "" {
		return fmt.Errorf("ratewarden: %skey must not be empty: %w", where, ErrInvalidKey)
	}
	return nil
}

// validateLimits checks that there is at least one limit, each valid, with
// distinct scopes.
func validateLimits(where string, limits []Limit) error {
	if len(limits) == 0 {
		return fmt.Errorf("ratewarden: %sno limits given: %w", where, ErrInvalidLimit)
	}
	for i, lim := range limits {
		if f := lim.fault(); f != valid {
			if len(limits) == 1 {
				return fmt.Errorf("ratewarden: %s%s: %w", where, f.describe(lim), ErrInvalidLimit)
			}
			return fmt.Errorf("ratewarden: %slimits[%d]: %s: %w", where, i, f.describe(lim), ErrInvalidLimit)
		}
		for j := range i {
			if limits[j].Algorithm == lim.Algorithm && limits[j].Period == lim.Period {
				return fmt.Errorf("ratewarden: %slimits[%d] (%v) and limits[%d] (%v) share the scope %s; give each a different algorithm or period: %w", where, j, limits[j], i, lim, lim.Scope(), ErrInvalidLimit)
			}
		}
	}
	return nil
}

func validateCost(where string, n int64, limit Limit) error {
	switch {
	case n < 0:
		return fmt.Errorf("ratewarden: %scost must be >= 0, got %d: %w", where, n, ErrInvalidCost)
	case n > limit.Capacity():
		return fmt.Errorf("ratewarden: %scost %d exceeds the capacity %d of limit %v; it could never be admitted: %w", where, n, limit.Capacity(), limit, ErrInvalidCost)
	}
	return nil
}

// validateCheck checks one key's check: key, limits and cost.
func validateCheck(where, key string, limits []Limit, n int64) error {
	if err := validateKey(where, key); err != nil {
		return err
	}
	if err := validateLimits(where, limits); err != nil {
		return err
	}
	for _, lim := range limits {
		if err := validateCost(where, n, lim); err != nil {
			return err
		}
	}
	return nil
}

// ValidateRequest checks a Request as the Limiter does before calling a
// Store. Decorators and services that build Requests themselves use it.
func ValidateRequest(req *Request) error {
	if req.MaxDelay < 0 || req.MaxDelay > MaxPeriod {
		return fmt.Errorf("ratewarden: max delay must be between 0 and %v, got %v: %w", MaxPeriod, req.MaxDelay, ErrInvalidCost)
	}
	return validateCheck("", req.Key, req.Limits, req.Cost)
}
