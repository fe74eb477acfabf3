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
// is valid, 0 <= Cost <= every limit's Capacity, and 0 <= MaxDelay <=
// MaxPeriod.
type Request struct {
	Key    string
	Limits []Limit
	// Cost is the number of units the request consumes. A cost of 0
	// consumes nothing and reports the current state.
	Cost int64
	// Peek asks for the decision a Cost would get now, without consuming.
	Peek bool
	// MaxDelay > 0 makes the check a reservation (Limiter.Wait): when
	// every limit is a TokenBucket, a Cost that does not fit now but fits
	// within MaxDelay is admitted now for use Result.Delay later, and
	// consumed as if it arrived then, so reservations made on any replica
	// are served in the order they were made. The delay is the largest any
	// limit needs. With any other algorithm among Limits (a window cannot
	// promise capacity it has not reached) MaxDelay is ignored. With Peek
	// it reports the delay a reservation would get, consuming nothing.
	MaxDelay time.Duration
	// Refundable marks a check whose cost may be settled afterwards
	// (Limiter.Reserve): a refund on any replica can free capacity at any
	// moment, so a decision remembered locally (a deny cache, leased
	// capacity) must not answer it.
	Refundable bool
}

// Cacheable reports whether a decorator may answer r from what it holds
// locally (a remembered denial, leased capacity) and remember r's denial:
// false for reservations (MaxDelay) and refundable checks, which only the
// store decides.
func (r *Request) Cacheable() bool { return r.MaxDelay == 0 && !r.Refundable }

// Store is the one seam every backend implements: memstore (in process),
// redisstore (Redis), and the decorators that wrap another Store (the deny
// cache, leases, the failure policy, metrics). A decorator embeds the Store
// it wraps and writes only the methods whose behaviour it changes; the
// others pass through unchanged.
//
// The methods besides Check and Reset serve Limiter.Reserve and
// Limiter.Wait (Charge) and Limiter.Acquire (Acquire, Release, Extend).
// The stores and decorators of this module implement all of them. A Store
// that cannot do one (a read-only or demonstration backend) returns an
// error wrapping errors.ErrUnsupported from it, and the Limiter passes that
// error on.
//
// Implementations must be safe for concurrent use and must not retain req,
// res, limits, spent or applied after a call returns.
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

	// Charge takes in costs known only after the fact: the units a failure
	// policy admitted while the store could not be reached (package
	// fallback writes them back when it returns), the difference between a
	// reservation's estimate and its actual cost (Reservation.Settle), a
	// reservation given back (Limiter.Wait canceled).
	//
	// It applies each Spent, oldest first, to key's state under every one
	// of limits, where a check made at the instant it is dated (now − Ago)
	// counted or would have counted it, as far as that still matters now:
	//
	//   - FixedWindow: in the window of that instant while it is the
	//     current one. SlidingWindow: the same, and also while it is the
	//     previous one, which weighs on the current.
	//   - SlidingLog: as entries at that instant while it is in the window;
	//     a refund dated in the window removes that many entries, those at
	//     or before the instant newest first, then the oldest after it (the
	//     instant is an estimate on the caller's clock).
	//   - TokenBucket: a charge moves the TAT (from that instant, or the
	//     TAT when later) by Units emission intervals; a refund moves it
	//     back by as many, not before now (a full bucket holds no more).
	//   - A refund dated in the future (Ago < 0) gives back a reservation
	//     made with Request.MaxDelay: now − Ago is the TAT that reservation
	//     left (its Result's ResetAfter after the decision). A TokenBucket
	//     takes it back only when no reservation was made after it (its
	//     TAT is within half an emission interval of that instant); windows
	//     and logs, which never reserve, take nothing.
	//
	// Units whose effect has ended are dropped: a charge then adds nothing,
	// a refund gives nothing back, and a window never goes below zero. A
	// charge never denies and may take the count past the limit; later
	// checks see it. When applied is not nil (it has len(limits) elements)
	// Charge writes into it, per limit, the units that took effect: the sum
	// of the Units, less what was dropped.
	//
	// Bad input (an invalid key or limit, Units of 0, Ago < 0 with Units >
	// 0) is an error wrapping the sentinel for the field, and changes
	// nothing (ValidateCharge).
	Charge(ctx context.Context, key string, limits []Limit, spent []Spent, applied []int64) error

	// Acquire takes a permit of key for holder when fewer than max permits
	// are held (expired ones do not count) and holder holds none; otherwise
	// it changes nothing. Over the limit is a result, not an error.
	//
	// Concurrency limits (Limiter.Acquire) are at most max permits of a key
	// held at once, on every replica together. Each permit belongs to a
	// holder (an identifier unique to one Acquire) and expires ttl after it
	// was acquired or last extended, so a holder that dies without
	// releasing frees its permit after ttl. The Limiter validates before a
	// Store sees a permit call: key and holder are non-empty, 1 <= max <=
	// MaxPermits, MinPeriod <= ttl <= MaxPeriod.
	Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (PermitResult, error)
	// Release gives holder's permit of key back. It reports false, with no
	// error, when holder holds none (it expired, or was released).
	Release(ctx context.Context, key, holder string) (bool, error)
	// Extend makes holder's permit of key expire ttl from now. It reports
	// false, changing nothing, when holder holds none: the permit expired
	// and may have been given to another holder since.
	Extend(ctx context.Context, key, holder string, ttl time.Duration) (bool, error)
}

// SingleChecker is implemented by stores with a faster path for the most
// common check, one limit (memstore, where the Request and result slice
// Check takes cost a noticeable share of a decision). CheckOne decides
// exactly as Check decides a Request{Key: key, Limits: []Limit{limit},
// Cost: cost, Peek: peek}, and returns its one Result. The Limiter uses it
// for Allow, AllowN and Peek when the store has it and no Observer is set;
// decorators need not implement it.
type SingleChecker interface {
	CheckOne(ctx context.Context, key string, limit Limit, cost int64, peek bool) (Result, error)
}

// Spent is Units consumed outside a check, Ago before a Charge call; or,
// with Units < 0, units given back (see Store.Charge).
type Spent struct {
	// Units is the number of units charged (> 0) or refunded (< 0); never
	// 0.
	Units int64
	// Ago is how long before the Charge call the units were admitted. A
	// negative Ago, only with Units < 0, dates a token-bucket reservation
	// not yet reached (see Store.Charge).
	Ago time.Duration
}

// ValidateCharge reports the first problem with a Charge's arguments, as an
// error wrapping ErrInvalidKey, ErrInvalidLimit or ErrInvalidCost; nil when
// they are valid. A Store calls it in Charge before touching any state.
func ValidateCharge(key string, limits []Limit, spent []Spent) error {
	if err := ValidateRequest(&Request{Key: key, Limits: limits}); err != nil {
		return err
	}
	for i, s := range spent {
		switch {
		case s.Units == 0:
			return fmt.Errorf("ratewarden: spent[%d]: units must not be 0: %w", i, ErrInvalidCost)
		case s.Units > MaxRate || s.Units < -MaxRate:
			return fmt.Errorf("ratewarden: spent[%d]: units must be within ±%d, got %d: %w", i, int64(MaxRate), s.Units, ErrInvalidCost)
		case s.Ago < 0 && s.Units > 0:
			return fmt.Errorf("ratewarden: spent[%d]: a charge cannot be dated in the future (ago %v); only refunds can: %w", i, s.Ago, ErrInvalidCost)
		case s.Ago > MaxPeriod || s.Ago < -MaxPeriod:
			return fmt.Errorf("ratewarden: spent[%d]: ago must be within ±%v, got %v: %w", i, MaxPeriod, s.Ago, ErrInvalidCost)
		}
	}
	return nil
}

// PermitResult is the outcome of Store.Acquire.
type PermitResult struct {
	// Acquired reports whether holder now holds a permit.
	Acquired bool
	// Held is the number of permits of the key held after the call, the
	// new one included.
	Held int64
	// RetryAfter is zero when Acquired; otherwise the time until the
	// soonest-expiring permit of the key expires. A release frees one
	// sooner.
	RetryAfter time.Duration
	// Source tells who decided; see Source.Degraded.
	Source Source
}

// MaxPermits is the largest max of a concurrency limit (Limiter.Acquire):
// a Redis key holds one sorted-set member per permit held.
const MaxPermits = 1_000_000
