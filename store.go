package ratewarden

import (
	"context"
	"fmt"
	"time"
)

// Request is one check handed to a Store: Cost units against every one of
// Limits for Key, decided all-or-nothing.
//
// The Limiter validates a Request before a Store sees it, so a Store may
// assume: Key is non-empty, Limits has at least one element and every Limit
// is valid, and 0 <= Cost <= every limit's Capacity.
type Request struct {
	Key    string
	Limits []Limit
	// Cost is the number of units the request consumes. A cost of 0
	// consumes nothing and reports the current state.
	Cost int64
	// Peek asks for the decision a Cost would get now, without consuming.
	Peek bool
}

// Store is the seam every backend implements: memstore (in process),
// redisstore (Redis), and decorators that wrap another Store (fallback,
// deny cache, metrics).
//
// Implementations must be safe for concurrent use and must not retain req or
// res after a call returns.
type Store interface {
	// Check decides req atomically and writes one Result per limit into
	// res, which has len(req.Limits) elements, in the order of req.Limits.
	// The request is admitted only when every limit admits it; otherwise
	// nothing is consumed from any limit. Each Result's Allowed reports that
	// limit's own verdict; Remaining is what is left after the check (before
	// it, when the request as a whole was denied or Peek is set).
	//
	// Over the limit is a Result, not an error. Errors are backend failures
	// (wrapping ErrStoreUnavailable) or input the store cannot represent.
	Check(ctx context.Context, req *Request, res []Result) error

	// Reset deletes the state of key under each of limits, so the next
	// check starts from a full allowance. Other limits of key and other keys
	// are untouched.
	Reset(ctx context.Context, key string, limits ...Limit) error
}

// Spent is Units consumed outside a store, Ago before a Charge call.
type Spent struct {
	Units int64
	Ago   time.Duration
}

// Charger is implemented by stores that can take in units consumed
// elsewhere: the units a failure policy admitted while the store could not
// be reached (package fallback writes them back when it returns), or a
// cost known only after the fact.
//
// Charge adds each Spent to key's state under every one of limits where a
// check made Ago before would have counted it, as far as that still
// matters now: in a fixed or sliding window that is still the current one
// (for a sliding window, also the previous one, which weighs on the
// current), in a sliding log while the instant is in the window, in a
// token bucket whose TAT it moves past now. Units whose effect has ended
// are dropped. A charge never denies and may take the count past the
// limit; later checks see it. spent should be oldest first.
//
// Bad input (an invalid key or limit, Units < 1, Ago < 0) is an error
// wrapping the sentinel for the field, and changes nothing.
type Charger interface {
	Charge(ctx context.Context, key string, limits []Limit, spent ...Spent) error
}

// ValidateCharge reports the first problem with a Charge's arguments, as an
// error wrapping ErrInvalidKey, ErrInvalidLimit or ErrInvalidCost; nil when
// they are valid. A Charger calls it before touching any state.
func ValidateCharge(key string, limits []Limit, spent []Spent) error {
	if err := ValidateRequest(&Request{Key: key, Limits: limits}); err != nil {
		return err
	}
	for i, s := range spent {
		if s.Units < 1 {
			return fmt.Errorf("ratewarden: spent[%d]: units must be >= 1, got %d: %w", i, s.Units, ErrInvalidCost)
		}
		if s.Ago < 0 {
			return fmt.Errorf("ratewarden: spent[%d]: ago must be >= 0, got %v: %w", i, s.Ago, ErrInvalidCost)
		}
	}
	return nil
}
