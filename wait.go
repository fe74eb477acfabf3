package ratewarden

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// giveBackTimeout bounds the store call that gives a canceled Wait's
// reservation back: the caller's context has ended by then.
const giveBackTimeout = time.Second

// Wait is WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until n units for key under limit are admitted, and returns
// the admission's Result; or it returns an error, and then nothing stays
// consumed. Use it to pace outbound work on a quota shared by every
// replica ("the vendor allows 50 requests/s for our account"), as
// golang.org/x/time/rate's Limiter.WaitN paces one process.
//
// A TokenBucket limit is waited for by reservation: one store call
// consumes the units now for the instant the bucket can take them and
// returns how long that is (Result.Delay), and WaitN sleeps that long.
// Waiters on every replica are thus served in the order their calls
// reached the store, with one store call each, and no replica polls. If
// ctx ends before the instant, WaitN returns ctx's error and gives the
// units back when no later reservation was made on top of them (see
// Store.Charge); otherwise they stay spent.
//
// The window algorithms cannot promise capacity ahead of time: WaitN
// checks, and when denied sleeps RetryAfter plus a random eighth of it
// (so that waiters released by the same window edge spread out) and checks
// again. A denial by a failure policy (fallback's FailClosed) is waited
// out the same way.
//
// Like x/time/rate, WaitN fails at once, consuming nothing, when the
// admission could only come after ctx's deadline: the error wraps
// ErrWouldExceedDeadline. Without a deadline it waits as long as it takes,
// up to MaxPeriod per reservation. n = 0 returns the state at once. Bad
// input (ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost) and store
// failures are returned as errors, as for AllowN.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	limits := [1]Limit{limit}
	if err := validateCheck("", key, limits[:], n); err != nil {
		return Result{}, err
	}
	var res [1]Result
	for {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("ratewarden: wait: %w", context.Cause(ctx))
		}
		budget := waitBudget(ctx)
		req := Request{Key: key, Limits: limits[:], Cost: n}
		if limit.Algorithm == TokenBucket && n > 0 {
			req.MaxDelay = budget
		}
		err := l.store.Check(ctx, &req, res[:])
		l.notify(key, res[:], err)
		if err != nil {
			return Result{}, err
		}
		r := res[0]
		if r.Allowed {
			if r.Delay > 0 {
				return l.sleepReserved(ctx, key, limit, n, r)
			}
			return r, nil
		}
		if r.RetryAfter > budget {
			return Result{}, fmt.Errorf("ratewarden: wait for %d units of %v would take %v, past the context's deadline (%v away): %w", n, limit, r.RetryAfter, budget, ErrWouldExceedDeadline)
		}
		if err := sleep(ctx, r.RetryAfter+min(jitter(r.RetryAfter), budget-r.RetryAfter)); err != nil {
			return Result{}, fmt.Errorf("ratewarden: wait: %w", err)
		}
	}
}

// waitBudget is how long a wait under ctx may last: until its deadline,
// else MaxPeriod.
func waitBudget(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), 0)
	}
	return MaxPeriod
}

// sleepReserved sleeps until the reservation r (admitted r.Delay from now)
// may be used. When ctx ends first it gives the units back and returns
// ctx's error.
func (l *Limiter) sleepReserved(ctx context.Context, key string, limit Limit, n int64, r Result) (Result, error) {
	start := time.Now()
	err := sleep(ctx, r.Delay)
	if err == nil {
		return r, nil
	}
	// The reservation left the TAT r.ResetAfter after the decision; date
	// the refund there, on this replica's clock.
	if left := r.ResetAfter - time.Since(start); left > 0 {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
		limits := [1]Limit{limit}
		_ = l.store.Charge(gctx, key, limits[:], []Spent{{Units: -n, Ago: -left}}, nil) // best effort: else the units stay spent
		cancel()
	}
	return Result{}, fmt.Errorf("ratewarden: wait: %w", err)
}

// sleep waits d or until ctx ends, returning ctx's cause then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// jitter is a random duration in [0, d/8].
func jitter(d time.Duration) time.Duration {
	if d < 8 {
		return 0
	}
	return rand.N(d/8 + 1)
}
