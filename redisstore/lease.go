package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/redis/go-redis/v9"
)

// A Lender takes a key's units out of Redis in batches and gives unused
// ones back: the Redis side of lease mode (package lease, which decides
// checks from the units it holds). Both are one execution of one Lua
// script on Redis' clock, on the very state the Store's checks keep, in
// the same format and with the same expiry, so leased units and plain
// checks share one count.
//
// A Lender works for FixedWindow and TokenBucket limits. It is safe for
// concurrent use.
type Lender struct {
	s  *Store
	ev evaluator // runs leaseScript
}

// NewLender returns a Lender on the Redis of s, which must have been made
// by New or NewGoRedis.
func NewLender(s *Store) (*Lender, error) {
	if s == nil {
		return nil, fmt.Errorf("redisstore: lender store must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	r, ok := s.ev.(rescripter)
	if !ok {
		return nil, fmt.Errorf("redisstore: a lender needs a Store made by New or NewGoRedis: %w", ratewarden.ErrInvalidConfig)
	}
	return &Lender{s: s, ev: r.rescript(leaseBody)}, nil
}

// A Grant is what Lender.Take took. Its durations count from the instant
// the script ran (Now), on Redis' clock.
type Grant struct {
	// Now is the instant the script ran, on Redis' clock.
	Now time.Time
	// Units is the number of units taken: from need to want, or 0 when
	// fewer than need were left, and then nothing was taken.
	Units int64
	// Remaining is the units Redis has left after the take.
	Remaining int64
	// RetryAfter is, when Units is 0, how long until need units are left
	// if nothing else consumes; otherwise 0.
	RetryAfter time.Duration
	// ResetAfter is how long until the full allowance is back if nothing
	// else consumes. After units were taken from a fixed window it is the
	// end of the window, after which they are worth nothing.
	ResetAfter time.Duration
	// Due is, for units taken from a token bucket, when the first of them
	// falls due: the instant GCRA would admit it, the TAT before the take
	// rounded up to the µs. Unit i (from 0) is due i × Period/Rate after
	// it. 0 for a fixed window.
	Due time.Duration
	// Window is, for a fixed window, the start of the window the units
	// belong to (the one containing Now): GiveBack takes it. The zero Time
	// for a token bucket.
	Window time.Time
}

// Take takes units of key under limit from Redis in one atomic step, if
// at least need are left: min(want, remaining) of them, exactly as a
// check of that cost would consume them (so a token bucket's TAT moves by
// that many emission intervals). Otherwise it takes nothing and reports
// when need would fit. limit must be a valid FixedWindow or TokenBucket
// limit, and 1 <= need <= want, need <= limit.Capacity(); bad arguments
// are an error naming the field and reach no Redis.
//
// Redis and network failures wrap ratewarden.ErrStoreUnavailable.
func (l *Lender) Take(ctx context.Context, key string, limit ratewarden.Limit, need, want int64) (Grant, error) {
	if err := takeArgs(key, limit, need, want); err != nil {
		return Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, unavailable(ctx, "take", err)
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	e := l.s.enc.get(limit)
	args := []string{"take", e.arg, strconv.FormatInt(need, 10), strconv.FormatInt(want, 10)}
	var buf [6]int64
	out, err := l.ev.eval(ctx, []string{l.s.Key(key, limit)}, args, buf[:0])
	if err != nil {
		return Grant{}, unavailable(ctx, "take "+limit.Scope(), err)
	}
	if len(out) != 6 {
		return Grant{}, fmt.Errorf("redisstore: take %s: reply has %d integers, want 6: %w", limit.Scope(), len(out), ratewarden.ErrStoreUnavailable)
	}
	now := out[0]
	g := Grant{
		Now:        time.UnixMicro(now),
		Units:      out[1],
		Remaining:  out[2],
		RetryAfter: time.Duration(out[3]) * time.Microsecond,
		ResetAfter: time.Duration(out[4]) * time.Microsecond,
	}
	if limit.Algorithm == ratewarden.FixedWindow {
		p := limit.Period.Microseconds()
		g.Window = time.UnixMicro(now - now%p)
	} else {
		g.Due = time.Duration(out[5]) * time.Microsecond
	}
	return g, nil
}

// GiveBack gives up to n unused units taken by Take back to key's fixed
// window under limit that starts at window (Grant.Window), and returns
// how many it gave back: none once Redis holds a later window (the units
// expired with theirs), and never more than the window counts. The key's
// expiry stays as it is. limit must be a valid FixedWindow limit and
// n >= 1; bad arguments are an error naming the field and reach no Redis.
//
// Redis and network failures wrap ratewarden.ErrStoreUnavailable.
func (l *Lender) GiveBack(ctx context.Context, key string, limit ratewarden.Limit, window time.Time, n int64) (int64, error) {
	if limit.Algorithm != ratewarden.FixedWindow {
		return 0, fmt.Errorf("redisstore: give back: units go back to fixed windows only, got %s: %w", limit.Algorithm, ratewarden.ErrInvalidLimit)
	}
	if n < 1 {
		return 0, fmt.Errorf("redisstore: give back: units must be at least 1, got %d: %w", n, ratewarden.ErrInvalidCost)
	}
	if err := ratewarden.ValidateRequest(&ratewarden.Request{Key: key, Limits: []ratewarden.Limit{limit}}); err != nil {
		return 0, fmt.Errorf("redisstore: give back: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, unavailable(ctx, "give back", err)
	}
	ctx, cancel := l.s.bound(ctx)
	defer cancel()
	args := []string{"give", strconv.FormatInt(window.UnixMicro(), 10), strconv.FormatInt(n, 10), strconv.FormatInt(limit.Period.Microseconds(), 10)}
	var buf [2]int64
	out, err := l.ev.eval(ctx, []string{l.s.Key(key, limit)}, args, buf[:0])
	if err != nil {
		return 0, unavailable(ctx, "give back "+limit.Scope(), err)
	}
	if len(out) != 2 {
		return 0, fmt.Errorf("redisstore: give back %s: reply has %d integers, want 2: %w", limit.Scope(), len(out), ratewarden.ErrStoreUnavailable)
	}
	return out[1], nil
}

// takeArgs validates the arguments of Take.
func takeArgs(key string, limit ratewarden.Limit, need, want int64) error {
	if limit.Algorithm != ratewarden.FixedWindow && limit.Algorithm != ratewarden.TokenBucket {
		return fmt.Errorf("redisstore: take: leases need fixed_window or token_bucket, got %s: %w", limit.Algorithm, ratewarden.ErrInvalidLimit)
	}
	if need < 1 || want < need {
		return fmt.Errorf("redisstore: take: need must be at least 1 and want at least need, got need %d, want %d: %w", need, want, ratewarden.ErrInvalidCost)
	}
	if err := ratewarden.ValidateRequest(&ratewarden.Request{Key: key, Limits: []ratewarden.Limit{limit}, Cost: need}); err != nil {
		return fmt.Errorf("redisstore: take: %w", err)
	}
	return nil
}

// rescripter is an evaluator that can run another script on its client:
// rescript returns one running body after the evaluator's own clock.
type rescripter interface {
	rescript(body string) evaluator
}

func (e *rueidisEval) rescript(body string) evaluator {
	// The lender's calls are not batched, so WithBatchLanes does not
	// bound them: their dedicated connections are the default lanes'.
	return newRueidisEval(e.c, clockLua+body, evalConfig{ack: e.ack, lanes: DefaultBatchLanes, functions: e.fn != ""})
}

func (e *goRedisEval) rescript(body string) evaluator {
	return &goRedisEval{c: e.c, s: redis.NewScript(clockLua + body)}
}
