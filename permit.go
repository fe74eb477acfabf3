package ratewarden

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// Permit is one slot of a concurrency limit (Limiter.Acquire): while it is
// held, it counts against the key's max on every replica. Release it when
// the work is done; Extend it while the work outlasts its ttl. A Permit is
// safe for concurrent use.
type Permit struct {
	// Acquired reports whether the permit is held. When false nothing
	// changed: max permits of the key are held, and Release and Extend do
	// nothing.
	Acquired bool
	// Held is the number of permits of the key held right after the
	// call, this one included when Acquired.
	Held int64
	// Max is the limit the permit was asked for.
	Max int64
	// RetryAfter is zero when Acquired; otherwise the time until the
	// soonest-expiring permit of the key expires. A release frees one
	// sooner.
	RetryAfter time.Duration
	// Source tells who decided; see Source.Degraded.
	Source Source

	l      *Limiter
	key    string
	holder string
	mu     sync.Mutex
	done   bool // released
}

// Degraded reports whether the permit was decided without the shared store
// (by a failure policy).
func (p *Permit) Degraded() bool { return p.Source.Degraded() }

// Key returns the key the permit counts against.
func (p *Permit) Key() string { return p.key }

// Holder returns the identifier the store knows the permit by: 128 random
// bits, as text. With the key it names the permit on every replica
// (PermitOf); whoever has both can release or extend it, so hand it only
// to the permit's owner.
func (p *Permit) Holder() string { return p.holder }

// PermitOf returns a handle on the permit holder holds of key, acquired
// elsewhere: on another replica, or by a client of a service that kept
// key and Holder. Release and Extend act on it as on the Permit Acquire
// returned (Acquired is true, Held and Max are not known: 0). Nothing is
// asked of the store: a permit that has expired is found lost by Extend,
// and Release of it does nothing. key and holder must not be empty
// (ErrInvalidKey).
func (l *Limiter) PermitOf(key, holder string) (*Permit, error) {
	if err := validateKey("", key); err != nil {
		return nil, err
	}
	if holder == "" {
		return nil, fmt.Errorf("ratewarden: permit holder must not be empty: %w", ErrInvalidKey)
	}
	return &Permit{Acquired: true, l: l, key: key, holder: holder}, nil
}

// Acquire takes one of max permits of key for ttl, when fewer than max are
// held on all replicas together, and reports in the Permit whether it got
// one; at max, nothing changes and Permit.Acquired is false (over the
// limit is a result, not an error). Use it for "at most 10 jobs in flight
// per tenant".
//
// A permit is held until Release, or until ttl passes without Extend: a
// replica that dies holding permits frees them after ttl. Choose ttl above
// the longest the work takes, or Extend it as the work goes. Redis holds a
// key's permits in one sorted set, each with its own expiry.
//
// max must be 1 to MaxPermits and ttl MinPeriod to MaxPeriod (errors
// wrapping ErrInvalidLimit), key non-empty (ErrInvalidKey). Store failures
// are errors as for Allow, unless a failure policy answers them.
func (l *Limiter) Acquire(ctx context.Context, key string, max int64, ttl time.Duration) (*Permit, error) {
	if err := validateKey("", key); err != nil {
		return nil, err
	}
	if err := ValidatePermit(max, ttl); err != nil {
		return nil, err
	}
	holder := rand.Text()
	pr, err := l.store.Acquire(ctx, key, holder, max, ttl)
	if err != nil {
		return nil, err
	}
	return &Permit{Acquired: pr.Acquired, Held: pr.Held, Max: max, RetryAfter: pr.RetryAfter, Source: pr.Source, l: l, key: key, holder: holder}, nil
}

// AcquireWait is Acquire, retried until a permit is acquired or ctx ends.
// It polls: after each refusal it sleeps the shorter of RetryAfter and a
// backoff that starts at 5ms and doubles to 200ms, each with random
// jitter, so that waiters on many replicas do not retry in step. When ctx
// ends first it returns ctx's error, holding nothing.
func (l *Limiter) AcquireWait(ctx context.Context, key string, limit int64, ttl time.Duration) (*Permit, error) {
	backoff := 5 * time.Millisecond
	for {
		p, err := l.Acquire(ctx, key, limit, ttl)
		if err != nil || p.Acquired {
			return p, err
		}
		d := max(min(p.RetryAfter, backoff), time.Millisecond)
		d = d/2 + mrand.N(d/2+1) // uniform in [d/2, d]
		if err := sleep(ctx, d); err != nil {
			return nil, fmt.Errorf("ratewarden: acquire: %w", err)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// ValidatePermit reports the first problem with a concurrency limit's max
// and ttl, as Acquire checks them: an error wrapping ErrInvalidLimit, or
// nil. A service that reads concurrency limits from its configuration
// checks them with it when it loads them.
func ValidatePermit(max int64, ttl time.Duration) error {
	if max < 1 || max > MaxPermits {
		return fmt.Errorf("ratewarden: max permits must be between 1 and %d, got %d: %w", MaxPermits, max, ErrInvalidLimit)
	}
	return validateTTL(ttl)
}

// validateTTL checks a permit's ttl.
func validateTTL(ttl time.Duration) error {
	if ttl < MinPeriod || ttl > MaxPeriod {
		return fmt.Errorf("ratewarden: permit ttl must be between %v and %v, got %v: %w", MinPeriod, MaxPeriod, ttl, ErrInvalidLimit)
	}
	return nil
}

// Release gives the permit back, so another holder can take it now rather
// than after its ttl. Releasing a permit that was not acquired, was
// released already, has expired, or was granted by fallback's FailOpen
// (held nowhere) does nothing and returns nil. On a
// store error the permit stays held until its ttl; Release may be called
// again.
func (p *Permit) Release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.Acquired || p.done || p.Source == SourceFailOpen { // a FailOpen permit is held nowhere
		return nil
	}
	if _, err := p.l.store.Release(ctx, p.key, p.holder); err != nil {
		return err
	}
	p.done = true
	return nil
}

// Extend makes the permit expire ttl from now, for work that outlasts the
// ttl it was acquired with. It returns an error wrapping ErrPermitLost when
// the permit expired before (it may be another holder's by now: the work
// it guarded is no longer counted), or was released or never acquired.
// ttl must be MinPeriod to MaxPeriod (ErrInvalidLimit).
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	if err := validateTTL(ttl); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.Acquired || p.done {
		return fmt.Errorf("ratewarden: extend: the permit is not held (never acquired, or released): %w", ErrPermitLost)
	}
	if p.Source == SourceFailOpen {
		return nil // admitted by a failure policy without being held anywhere
	}
	ok, err := p.l.store.Extend(ctx, p.key, p.holder, ttl)
	switch {
	case err != nil:
		return err
	case !ok:
		p.done = true
		return fmt.Errorf("ratewarden: extend: the permit expired before it was extended: %w", ErrPermitLost)
	}
	return nil
}
