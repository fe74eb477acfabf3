package fallback

import (
	"context"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Acquire implements ratewarden.Store: it asks the primary under the
// deadline and the breaker
// and, when the primary cannot decide, answers by the policy of the Store
// (WithPolicy; WithPolicyFunc, which chooses per Limit, is not asked) with
// a nil error:
//
//   - FailOpen: acquired, held nowhere (Source ratewarden.SourceFailOpen;
//     Held 1, as for a free key). The Limiter's Release and Extend of such
//     a permit do nothing.
//   - FailClosed: not acquired, with the RetryAfter of a FailClosed check
//     (Source ratewarden.SourceFailClosed; Held 0: unknown).
//   - LocalFallback: a permit of the local store, which holds this
//     replica's share of max: max/replicas, rounded down, at least 1
//     (Source ratewarden.SourceLocalFallback), so that the replicas
//     together hold at most max during the outage.
//
// Permits held locally are not written back: a permit is no count, and it
// ends by Release or ttl. After the primary returns, a key can have up to
// max permits in the primary and, until the local ones are released or
// expire, the local ones besides. A key whose stored state is unusable
// (ratewarden.ErrKeyState) is answered by the policy, as for a check.
// Bad input and the end of the caller's context are errors, as for Check.
func (s *Store) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	if ctx.Err() != nil {
		return ratewarden.PermitResult{}, callerGone(ctx)
	}
	var pr ratewarden.PermitResult
	cause, err := s.ask(ctx, func(cctx context.Context) error {
		var err error
		pr, err = s.primary.Acquire(cctx, key, holder, max, ttl)
		return err
	})
	switch {
	case err != nil:
		return ratewarden.PermitResult{}, err
	case cause == nil:
		return pr, nil
	}
	return s.degradePermit(ctx, key, holder, max, ttl, cause)
}

// degradePermit answers an Acquire by the Store's policy; cause is why the
// primary did not.
func (s *Store) degradePermit(ctx context.Context, key, holder string, max int64, ttl time.Duration, cause error) (ratewarden.PermitResult, error) {
	var pr ratewarden.PermitResult
	switch s.cfg.policy {
	case FailOpen:
		pr = ratewarden.PermitResult{Acquired: true, Held: 1, Source: ratewarden.SourceFailOpen}
	case FailClosed:
		pr = ratewarden.PermitResult{RetryAfter: s.retryAfter(), Source: ratewarden.SourceFailClosed}
	default:
		var err error
		pr, err = s.local.Acquire(ctx, localKey(key), holder, permitShare(max, int64(s.cfg.replicas)), ttl)
		if err != nil {
			return ratewarden.PermitResult{}, fmt.Errorf("fallback: local fallback: acquire: %w", err)
		}
		pr.Source = ratewarden.SourceLocalFallback
	}
	if s.cfg.onDegraded != nil {
		s.cfg.onDegraded(policyOfSource(pr.Source), cause)
	}
	return pr, nil
}

// permitShare is this replica's part of max permits: max/replicas,
// rounded down, at least 1.
func permitShare(limit, replicas int64) int64 {
	return max(limit/replicas, 1)
}

// Release implements ratewarden.Store. A permit the local store
// holds (acquired during an outage) is released there; any other goes to
// the primary under the deadline and the breaker. When the primary
// cannot take it, Release returns an error wrapping
// ratewarden.ErrStoreUnavailable (ErrOpen while the breaker is open): the
// permit stays held until its ttl, and Release may be called again.
func (s *Store) Release(ctx context.Context, key, holder string) (bool, error) {
	if s.local != nil {
		if ok, err := s.local.Release(ctx, localKey(key), holder); err == nil && ok {
			return true, nil
		}
	}
	return s.permitCall(ctx, func(cctx context.Context) (bool, error) { return s.primary.Release(cctx, key, holder) })
}

// Extend implements ratewarden.Store like Release: a permit the
// local store holds is extended there, any other by the primary under the
// deadline and the breaker; when the primary cannot take it, the error
// wraps ratewarden.ErrStoreUnavailable and the permit keeps its expiry.
func (s *Store) Extend(ctx context.Context, key, holder string, ttl time.Duration) (bool, error) {
	if s.local != nil {
		if ok, err := s.local.Extend(ctx, localKey(key), holder, ttl); err == nil && ok {
			return true, nil
		}
	}
	return s.permitCall(ctx, func(cctx context.Context) (bool, error) { return s.primary.Extend(cctx, key, holder, ttl) })
}

// permitCall runs a Release or Extend on the primary through the breaker.
// No policy answers it: its errors are returned (a key's bad state as it
// is, counted as the primary's success).
func (s *Store) permitCall(ctx context.Context, fn func(context.Context) (bool, error)) (bool, error) {
	if ctx.Err() != nil {
		return false, callerGone(ctx)
	}
	var ok bool
	cause, err := s.ask(ctx, func(cctx context.Context) error {
		var err error
		ok, err = fn(cctx)
		return err
	})
	if err == nil {
		err = cause
	}
	if err != nil {
		return false, err
	}
	return ok, nil
}

// Acquire implements ratewarden.Store on the partition of key; see
// Store.Acquire.
func (p *Partitioned) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	st, err := p.part(key)
	if err != nil {
		return ratewarden.PermitResult{}, err
	}
	return st.Acquire(ctx, key, holder, max, ttl)
}

// Release implements ratewarden.Store on the partition of key; see
// Store.Release.
func (p *Partitioned) Release(ctx context.Context, key, holder string) (bool, error) {
	st, err := p.part(key)
	if err != nil {
		return false, err
	}
	return st.Release(ctx, key, holder)
}

// Extend implements ratewarden.Store on the partition of key; see
// Store.Extend.
func (p *Partitioned) Extend(ctx context.Context, key, holder string, ttl time.Duration) (bool, error) {
	st, err := p.part(key)
	if err != nil {
		return false, err
	}
	return st.Extend(ctx, key, holder, ttl)
}
