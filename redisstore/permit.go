package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden"
)

// The permit script: lua/permit.lua after the arithmetic it needs (and,
// put in front by the evaluator, the clock).
var (
	//go:embed lua/permit.lua
	permitLua  string
	permitBody = arithLua + permitLua
)

// Acquire implements ratewarden.Store: one execution of the permit
// script drops key's expired permits and, when fewer than max remain and
// holder holds none, gives holder one expiring ttl from now, on Redis'
// clock. The key's permits live in one sorted set (PermitKey), which
// expires with its latest permit. When refused, RetryAfter is the time
// until the soonest permit expires.
//
// Bad input (an empty key or holder, max outside 1..MaxPermits, ttl
// outside MinPeriod..MaxPeriod) is an error naming the field, and reaches
// no Redis. Redis and network failures wrap ratewarden.ErrStoreUnavailable;
// a key holding another type, ratewarden.ErrKeyState.
func (s *Store) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	if err := permitArgs("acquire", key, holder); err != nil {
		return ratewarden.PermitResult{}, err
	}
	switch {
	case max < 1 || max > ratewarden.MaxPermits:
		return ratewarden.PermitResult{}, fmt.Errorf("redisstore: acquire: max permits must be between 1 and %d, got %d: %w", ratewarden.MaxPermits, max, ratewarden.ErrInvalidLimit)
	case ttl < ratewarden.MinPeriod || ttl > ratewarden.MaxPeriod:
		return ratewarden.PermitResult{}, fmt.Errorf("redisstore: acquire: permit ttl must be between %v and %v, got %v: %w", ratewarden.MinPeriod, ratewarden.MaxPeriod, ttl, ratewarden.ErrInvalidLimit)
	}
	var buf [4]int64
	out, err := s.permit(ctx, "acquire", key, buf[:0], holder, strconv.FormatInt(max, 10), strconv.FormatInt(ttl.Microseconds(), 10))
	if err != nil {
		return ratewarden.PermitResult{}, err
	}
	if len(out) != 4 {
		return ratewarden.PermitResult{}, fmt.Errorf("redisstore: acquire: reply has %d integers, want 4: %w", len(out), ratewarden.ErrStoreUnavailable)
	}
	return ratewarden.PermitResult{Acquired: out[1] == 1, Held: out[2], RetryAfter: time.Duration(out[3]) * time.Microsecond}, nil
}

// Release implements ratewarden.Store: one execution of the permit
// script removes holder's permit of key, and reports whether it was held
// and unexpired. The key's expiry follows its latest remaining permit.
// Failures and bad input as for Acquire.
func (s *Store) Release(ctx context.Context, key, holder string) (bool, error) {
	if err := permitArgs("release", key, holder); err != nil {
		return false, err
	}
	return s.permitDone(ctx, "release", key, holder)
}

// Extend implements ratewarden.Store: one execution of the permit
// script makes holder's permit of key expire ttl from now, on Redis'
// clock, if it is there and has not expired; otherwise it changes nothing
// and reports false. Failures and bad input as for Acquire.
func (s *Store) Extend(ctx context.Context, key, holder string, ttl time.Duration) (bool, error) {
	if err := permitArgs("extend", key, holder); err != nil {
		return false, err
	}
	if ttl < ratewarden.MinPeriod || ttl > ratewarden.MaxPeriod {
		return false, fmt.Errorf("redisstore: extend: permit ttl must be between %v and %v, got %v: %w", ratewarden.MinPeriod, ratewarden.MaxPeriod, ttl, ratewarden.ErrInvalidLimit)
	}
	return s.permitDone(ctx, "extend", key, holder, strconv.FormatInt(ttl.Microseconds(), 10))
}

// permitArgs checks the key and holder of a permit call.
func permitArgs(op, key, holder string) error {
	switch {
	case key == "":
		return fmt.Errorf("redisstore: %s: key must not be empty: %w", op, ratewarden.ErrInvalidKey)
	case holder == "":
		return fmt.Errorf("redisstore: %s: holder must not be empty: %w", op, ratewarden.ErrInvalidKey)
	}
	return nil
}

// permitDone runs a release or an extend and returns its verdict.
func (s *Store) permitDone(ctx context.Context, op, key string, args ...string) (bool, error) {
	var buf [2]int64
	out, err := s.permit(ctx, op, key, buf[:0], args...)
	if err != nil {
		return false, err
	}
	if len(out) != 2 {
		return false, fmt.Errorf("redisstore: %s: reply has %d integers, want 2: %w", op, len(out), ratewarden.ErrStoreUnavailable)
	}
	return out[1] == 1, nil
}

// permit runs op of the permit script on key's permits with args and
// appends the reply to dst.
func (s *Store) permit(ctx context.Context, op, key string, dst []int64, args ...string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return dst, unavailable(ctx, op, err)
	}
	ev := s.permits.get(s, permitBody)
	if ev == nil {
		return dst, fmt.Errorf("redisstore: %s: this Store's evaluator runs only the check script: %w", op, ratewarden.ErrInvalidConfig)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	out, err := ev.eval(ctx, []string{s.PermitKey(key)}, append([]string{op}, args...), dst)
	if err != nil {
		return dst, unavailable(ctx, op+" permit", err)
	}
	return out, nil
}
