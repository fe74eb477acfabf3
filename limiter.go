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
func New(store Store, opts ...Option) (*Limiter, error) {
	if nilcheck.Is(store) {
		return nil, fmt.Errorf("%w: store must not be nil%s", ErrInvalidConfig, nilcheck.Describe(store))
	}
	l := &Limiter{store: store}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidConfig)
		}
		o(l)
	}
	l.calls.New = func() any { return new(call) }
	return l, nil
}

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
	if err := validateKey(key); err != nil {
		return Result{}, err
	}
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	if err := validateCost(n, limit); err != nil {
		return Result{}, err
	}
	c := l.calls.Get().(*call)
	c.lim[0] = limit
	c.req = Request{Key: key, Limits: c.lim[:], Cost: n, Peek: peek}
	err := l.store.Check(ctx, &c.req, c.res[:])
	res := c.res[0]
	if l.observer != nil {
		if err != nil {
			l.observer(key, nil, err)
		} else {
			l.observer(key, c.res[:], nil)
		}
	}
	*c = call{}
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
	if err := validateKey(key); err != nil {
		return Decision{}, err
	}
	if err := validateLimits(limits); err != nil {
		return Decision{}, err
	}
	for _, lim := range limits {
		if err := validateCost(n, lim); err != nil {
			return Decision{}, err
		}
	}
	req := Request{Key: key, Limits: limits, Cost: n}
	res := make([]Result, len(limits))
	err := l.store.Check(ctx, &req, res)
	if l.observer != nil {
		if err != nil {
			l.observer(key, nil, err)
		} else {
			l.observer(key, res, nil)
		}
	}
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Allowed: true, Results: res}
	for _, r := range res {
		d.Allowed = d.Allowed && r.Allowed
	}
	return d, nil
}

// Reset clears the state of key under each of limits: the next check starts
// from a full allowance. Other keys, and other limits of key, keep theirs.
func (l *Limiter) Reset(ctx context.Context, key string, limits ...Limit) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := validateLimits(limits); err != nil {
		return err
	}
	return l.store.Reset(ctx, key, limits...)
}

func validateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key must not be empty", ErrInvalidKey)
	}
	return nil
}

// validateLimits checks that there is at least one limit, each valid, with
// distinct scopes.
func validateLimits(limits []Limit) error {
	if len(limits) == 0 {
		return fmt.Errorf("%w: no limits given", ErrInvalidLimit)
	}
	for i, lim := range limits {
		if err := lim.Validate(); err != nil {
			if len(limits) == 1 {
				return err
			}
			return fmt.Errorf("limits[%d]: %w", i, err)
		}
		for j := range i {
			if limits[j].Algorithm == lim.Algorithm && limits[j].Period == lim.Period {
				return fmt.Errorf("%w: limits[%d] (%v) and limits[%d] (%v) share the scope %s; give each a different algorithm or period", ErrInvalidLimit, j, limits[j], i, lim, lim.Scope())
			}
		}
	}
	return nil
}

// ValidateRequest checks a Request as the Limiter does before calling a
// Store. Decorators and services that build Requests themselves use it.
func ValidateRequest(req *Request) error {
	if err := validateKey(req.Key); err != nil {
		return err
	}
	if err := validateLimits(req.Limits); err != nil {
		return err
	}
	for _, lim := range req.Limits {
		if err := validateCost(req.Cost, lim); err != nil {
			return err
		}
	}
	return nil
}

func validateCost(n int64, limit Limit) error {
	switch {
	case n < 0:
		return fmt.Errorf("%w: cost must be >= 0, got %d", ErrInvalidCost, n)
	case n > limit.Capacity():
		return fmt.Errorf("%w: cost %d exceeds the capacity %d of limit %v; it could never be admitted", ErrInvalidCost, n, limit.Capacity(), limit)
	}
	return nil
}
