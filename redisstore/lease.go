package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

//go:embed lua/lease.lua
var leaseLua string

// leaseScript shares the clock preamble and the arithmetic of the check
// script: "now" is Redis TIME, and a token bucket's TAT is read and moved
// exactly as a check does.
var leaseScript = clockLua + arithLua + leaseLua

// Defaults for NewLeaser.
const (
	// DefaultLeaseSize is the number of units a lease asks for.
	DefaultLeaseSize = 20
	// DefaultMaxLeases bounds the leases a Leaser holds (one per key and
	// limit).
	DefaultMaxLeases = 10_000
)

// Leaser is a ratewarden.Store that answers checks of hot keys from
// capacity leased from Redis in batches: lease mode.
//
// A check of a leased limit is answered from this replica's lease when it
// holds enough units; otherwise one script call atomically takes up to
// WithLeaseSize units (at least the ones the check needs) from the key's
// state in Redis — the same state, in the same format and with the same
// expiry, that plain checks of the Store use, so leases and plain checks
// share one count. The lease is held in memory and used by the checks that
// follow, without Redis.
//
// Leases work for FixedWindow and TokenBucket limits, in single-limit
// checks with a cost above 0. Everything else — other algorithms,
// multi-limit checks, cost 0, and limits WithLeased does not select — is
// decided by the Store as usual (a multi-limit check does not see this
// replica's leased units, so it may deny what a lease would have admitted).
//
// # Exactness
//
// Nothing is admitted that Redis did not count: a leased unit is counted
// when it is taken, whether or not it is used, so all replicas together
// never admit more than the limit.
//
//   - FixedWindow: a lease takes min(size, remaining) units from the
//     current window's count, and its units are used only until the
//     window ends, measured on the local monotonic clock from the instant
//     before the script call (the window ends later than that in real
//     time), less 1/1024 of the time left to absorb a difference in clock
//     rates. Units still held at the end of the window are lost
//     (under-admission); Close gives unused units back to the current
//     window (the count never goes below 0).
//   - TokenBucket (GCRA): a lease of k units moves the theoretical arrival
//     time by k emission intervals, as a check of cost k would. The j-th
//     leased unit may be used only until the instant at which the bucket
//     would have admitted it (the lease's start plus j−1 intervals), so
//     the admitted sequence is one that GCRA itself would have admitted at
//     the same instants. Units whose instant passed unused are lost: a
//     replica whose traffic on a key is slower than the rate wastes most
//     of each lease. Leases of a token bucket are never given back.
//
// The cost of this is under-admission: units leased by one replica cannot
// be used by another. A check is denied when Redis has fewer units left
// than it needs beyond this replica's lease, even if other replicas hold
// unused units; with R replicas at most R × size units of a window can go
// unused this way. docs/performance.md has measured numbers.
//
// A denial by Redis is remembered by the lease until its RetryAfter: a
// check needing at least as many units from Redis is denied locally. A
// Reset through this Leaser drops its leases for the key first and makes
// checks of the key plain while it runs; a Reset through another replica
// (or capacity that replica gives back on Close) is not seen: this replica
// keeps using units it leased before, up to one lease of units beyond the
// fresh allowance, and keeps its remembered denial until its RetryAfter.
//
// A local answer's Remaining is the lease's unused units plus what Redis
// had left beyond them at the last script call (exact while no other
// replica consumes meanwhile).
//
// Admissions from a lease have Source ratewarden.SourceLease, denials
// remembered from Redis SourceCache, and decisions of a script call
// SourceStore.
//
// The Leaser starts no goroutines. Call Close when done with it, before
// closing the Redis client, to give unused units back.
type Leaser struct {
	store  *Store
	run    func(ctx context.Context, keys, args []string) ([]int64, error)
	size   int64
	leased func(ratewarden.Limit) bool
	max    int
	base   time.Time

	mu        sync.RWMutex
	leases    map[leaseKey]*lease
	resetting map[string]int // keys with a Reset in progress: checks go plain
	closed    bool
}

type leaseKey struct {
	key   string
	limit ratewarden.Limit
}

// lease is the local state of one key under one limit. Its fields are
// guarded by lock, held while a check decides (across its script call).
type lease struct {
	lock chan struct{}
	dead bool // dropped by Reset, Close or eviction

	granted int64 // units leased by the last script call
	next    int64 // index of the next unused unit
	t0      int64 // ns on the Leaser's clock just before that call
	// FixedWindow: units are usable while now < end; ws is the window's
	// start (Redis µs) for Close.
	end int64
	ws  int64
	// TokenBucket: unit j is usable until t0 + offset(first + j·P/rate).
	firstUs  int64
	periodUs int64
	rate     int64
	resetAt  int64 // ns: when the bucket is full again, as far as known

	deniedNeed  int64 // a script call denied this many units ...
	deniedUntil int64 // ... until then (ns); 0: no denial remembered

	// shared is what Redis had left beyond this lease at the last script
	// call: local answers report it in Remaining with the leased units.
	shared int64
}

// LeaseOption configures a Leaser.
type LeaseOption func(*leaseConfig)

type leaseConfig struct {
	size   int64
	leased func(ratewarden.Limit) bool
	max    int
}

// WithLeaseSize sets the number of units a lease asks for (default
// DefaultLeaseSize); a check that needs more asks for what it needs. It
// must be at least 1. Bigger leases mean fewer Redis calls and more units
// idle in replicas' leases.
func WithLeaseSize(n int64) LeaseOption { return func(c *leaseConfig) { c.size = n } }

// WithLeased selects the limits that use leases (default: every
// FixedWindow and TokenBucket limit). Limits of other algorithms are never
// leased, whatever f says. f must be safe for concurrent use.
func WithLeased(f func(ratewarden.Limit) bool) LeaseOption {
	return func(c *leaseConfig) { c.leased = f }
}

// WithMaxLeases bounds the number of leases held, one per key and limit
// (default DefaultMaxLeases); at least 1. When full, a new key drops a
// lease with no usable units, or else any idle lease, whose units are then
// lost until their window ends.
func WithMaxLeases(n int) LeaseOption { return func(c *leaseConfig) { c.max = n } }

// NewLeaser returns a Leaser deciding with leases on store's Redis.
func NewLeaser(store *Store, opts ...LeaseOption) (*Leaser, error) {
	if store == nil {
		return nil, fmt.Errorf("redisstore: %w: leaser store must not be nil", ratewarden.ErrInvalidConfig)
	}
	c := leaseConfig{size: DefaultLeaseSize, leased: func(ratewarden.Limit) bool { return true }, max: DefaultMaxLeases}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisstore: %w: nil LeaseOption", ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.size < 1:
		return nil, fmt.Errorf("redisstore: %w: lease size must be at least 1, got %d", ratewarden.ErrInvalidConfig, c.size)
	case c.leased == nil:
		return nil, fmt.Errorf("redisstore: %w: leased selector must not be nil", ratewarden.ErrInvalidConfig)
	case c.max < 1:
		return nil, fmt.Errorf("redisstore: %w: max leases must be at least 1, got %d", ratewarden.ErrInvalidConfig, c.max)
	}
	run, err := leaseRunner(store.ev)
	if err != nil {
		return nil, err
	}
	return &Leaser{
		store: store, run: run, size: c.size, leased: c.leased, max: c.max,
		base: time.Now(), leases: make(map[leaseKey]*lease), resetting: make(map[string]int),
	}, nil
}

// leaseRunner runs the lease script on the client behind ev.
func leaseRunner(ev evaluator) (func(ctx context.Context, keys, args []string) ([]int64, error), error) {
	switch e := ev.(type) {
	case *rueidisEval:
		lua := rueidis.NewLuaScript(leaseScript)
		return func(ctx context.Context, keys, args []string) ([]int64, error) {
			msgs, err := lua.Exec(ctx, e.c, keys, args).ToArray()
			if err != nil {
				return nil, err
			}
			out := make([]int64, len(msgs))
			for i := range msgs {
				if out[i], err = msgs[i].AsInt64(); err != nil {
					return nil, err
				}
			}
			return out, nil
		}, nil
	case *goRedisEval:
		script := redis.NewScript(leaseScript)
		return func(ctx context.Context, keys, args []string) ([]int64, error) {
			a := make([]any, len(args))
			for i, s := range args {
				a[i] = s
			}
			return script.Run(ctx, e.c, keys, a...).Int64Slice() // EVALSHA, EVAL on NOSCRIPT
		}, nil
	}
	return nil, fmt.Errorf("redisstore: %w: leases need a Store made by New or NewGoRedis", ratewarden.ErrInvalidConfig)
}

// now is the Leaser's monotonic clock in ns.
func (l *Leaser) now() int64 { return int64(time.Since(l.base)) }

// leases reports whether checks of lim use leases.
func (l *Leaser) leasable(lim ratewarden.Limit) bool {
	return (lim.Algorithm == ratewarden.FixedWindow || lim.Algorithm == ratewarden.TokenBucket) && l.leased(lim)
}

// Check implements ratewarden.Store; see Leaser for which checks use leases.
func (l *Leaser) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if req == nil {
		return fmt.Errorf("redisstore: %w: nil request", ratewarden.ErrInvalidConfig)
	}
	if err := ratewarden.ValidateRequest(req); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if len(res) != len(req.Limits) {
		return fmt.Errorf("redisstore: %w: res has %d elements for %d limits", ratewarden.ErrInvalidConfig, len(res), len(req.Limits))
	}
	if len(req.Limits) != 1 || req.Cost == 0 || !l.leasable(req.Limits[0]) {
		return l.store.Check(ctx, req, res)
	}
	for range 3 { // a lease dropped meanwhile: look again, then go plain
		ls := l.get(req.Key, req.Limits[0])
		if ls == nil {
			break
		}
		select {
		case ls.lock <- struct{}{}:
		case <-ctx.Done():
			return unavailable(ctx, "lease", ctx.Err())
		}
		if ls.dead {
			<-ls.lock
			continue
		}
		err := l.decide(ctx, ls, req, &res[0])
		<-ls.lock
		return err
	}
	return l.store.Check(ctx, req, res)
}

// get returns the lease of key under lim, made if needed, or nil when the
// key is being reset or the Leaser is closed.
func (l *Leaser) get(key string, lim ratewarden.Limit) *lease {
	k := leaseKey{key, lim}
	l.mu.RLock()
	ls := l.leases[k]
	l.mu.RUnlock()
	if ls != nil {
		return ls
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.resetting[key] > 0 {
		return nil
	}
	if ls = l.leases[k]; ls != nil {
		return ls
	}
	if len(l.leases) >= l.max {
		l.evict()
	}
	ls = &lease{lock: make(chan struct{}, 1)}
	l.leases[k] = ls
	return ls
}

// evictSample bounds the leases evict looks at, so that a full Leaser does
// not scan them all, under l.mu, for every new key. Map iteration order is
// random, so the sample is too.
const evictSample = 32

// evict drops one lease, preferring one with nothing usable among a random
// sample. Leases that a check holds are skipped; if every lease looked at
// is busy, nothing is dropped and the bound is exceeded by at most the
// checks in flight. l.mu is held.
func (l *Leaser) evict() {
	now := l.now()
	var idle leaseKey
	var idleLease *lease
	seen := 0
	for k, ls := range l.leases {
		if seen++; seen > evictSample {
			break
		}
		select {
		case ls.lock <- struct{}{}:
		default:
			continue // busy
		}
		if ls.usable(now) == 0 {
			ls.dead = true
			delete(l.leases, k)
			<-ls.lock
			if idleLease != nil {
				<-idleLease.lock
			}
			return
		}
		if idleLease == nil {
			idle, idleLease = k, ls // keep it locked: the fallback victim
			continue
		}
		<-ls.lock
	}
	if idleLease != nil {
		idleLease.dead = true
		delete(l.leases, idle)
		<-idleLease.lock
	}
}

// usable returns the units of ls usable at now (ns), skipping token-bucket
// units whose instant has passed. ls.lock is held.
func (ls *lease) usable(now int64) int64 {
	if ls.granted == 0 {
		return 0
	}
	if ls.periodUs == 0 { // FixedWindow
		if now >= ls.end {
			return 0
		}
		return ls.granted - ls.next
	}
	for ls.next < ls.granted && ls.deadline(ls.next) < now {
		ls.next++
	}
	return ls.granted - ls.next
}

// deadline is the last instant (ns) at which token-bucket unit j may be
// used: its GCRA instant, converted to the local clock conservatively.
func (ls *lease) deadline(j int64) int64 {
	// floor(j·P/rate) exactly (j·P may not fit in an int64), less 1 µs as
	// firstUs is the first unit's instant rounded up.
	q, _ := algo.MulDiv(j, ls.periodUs, ls.rate)
	us := ls.firstUs + q - 1
	return ls.t0 + local(us)
}

// local converts a duration on Redis' clock (µs, from the instant a call
// began) to one on the local clock (ns), shortened by 1/1024 so that a
// local clock running up to ~0.1% fast or slow against Redis' stays on the
// safe side.
func local(us int64) int64 {
	ns := us * 1000
	return ns - ns/1024
}

// decide answers req (one leased limit, cost > 0) with ls locked.
func (l *Leaser) decide(ctx context.Context, ls *lease, req *ratewarden.Request, r *ratewarden.Result) error {
	lim := req.Limits[0]
	now := l.now()
	avail := ls.usable(now)
	if avail >= req.Cost {
		rem := avail
		if !req.Peek {
			ls.next += req.Cost
			rem -= req.Cost
		}
		*r = ratewarden.Result{Allowed: true, Limit: lim, Remaining: rem + ls.shared, ResetAfter: max(time.Duration(ls.resetAt-now), 0), Source: ratewarden.SourceLease}
		return nil
	}
	need := req.Cost - avail
	if now < ls.deniedUntil && need >= ls.deniedNeed {
		retry := time.Duration(ls.deniedUntil - now)
		*r = ratewarden.Result{Limit: lim, Remaining: avail + ls.shared, RetryAfter: retry, ResetAfter: max(time.Duration(ls.resetAt-now), retry), Source: ratewarden.SourceCache}
		return nil
	}
	if req.Peek {
		// What a check would get: admitted if Redis has the units needed
		// beyond the lease.
		pr := ratewarden.Request{Key: req.Key, Limits: req.Limits, Cost: need, Peek: true}
		var out [1]ratewarden.Result
		if err := l.store.Check(ctx, &pr, out[:]); err != nil {
			return err
		}
		*r = out[0]
		r.Remaining += avail
		return nil
	}

	// A fixed window's leftover units belong to the window they were taken
	// in, and Redis' window may have rolled over since (the local clock
	// judged them usable a moment ago). So take the whole cost from Redis
	// and carry the leftovers over only if the new lease is of the same
	// window; otherwise one check could straddle two windows.
	fixed := lim.Algorithm == ratewarden.FixedWindow
	if fixed {
		need = req.Cost
	}
	e := l.store.enc.get(lim)
	args := []string{"take", e.args[0], e.args[1], e.args[2], e.args[3],
		strconv.FormatInt(need, 10), strconv.FormatInt(max(l.size, need), 10)}
	out, err := l.run(ctx, []string{l.store.Key(req.Key, lim)}, args)
	if err != nil {
		return unavailable(ctx, "lease "+lim.Scope(), err)
	}
	if len(out) != 5 {
		return fmt.Errorf("redisstore: lease: %w: reply has %d integers, want 5", ratewarden.ErrStoreUnavailable, len(out))
	}
	redisNow, granted, rem, a, b := out[0], out[1], out[2], out[3], out[4]
	ls.shared = rem
	if granted == 0 {
		ls.deniedNeed, ls.deniedUntil = need, now+local(a)
		ls.resetAt = now + local(b)
		*r = ratewarden.Result{
			Limit: lim, Remaining: avail + rem,
			RetryAfter: time.Duration(a) * time.Microsecond, ResetAfter: time.Duration(b) * time.Microsecond,
		}
		return nil
	}
	// The units left in the old lease (avail) and need new ones make up
	// this check (a fixed window: need is the whole cost); the rest of the
	// new lease is for the checks to come.
	ls.deniedUntil = 0
	ls.granted, ls.next, ls.t0 = granted, need, now
	ls.resetAt = now + local(b)
	if fixed {
		ws := redisNow + a - lim.Period.Microseconds()
		if ws == ls.ws {
			ls.granted += avail // same window: the leftovers still count
		}
		ls.periodUs = 0
		ls.end = now + local(a)
		ls.ws = ws
	} else {
		ls.firstUs, ls.periodUs, ls.rate = a, lim.Period.Microseconds(), lim.Rate
	}
	*r = ratewarden.Result{
		Allowed: true, Limit: lim, Remaining: ls.granted - ls.next + rem,
		ResetAfter: time.Duration(b) * time.Microsecond,
	}
	return nil
}

// Reset implements ratewarden.Store: it drops this Leaser's leases of key
// under limits (any rate of their scopes), waits for checks using them,
// and resets the key in Redis. Checks of key meanwhile are plain.
func (l *Leaser) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	if err := ratewarden.ValidateRequest(&ratewarden.Request{Key: key, Limits: limits}); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	l.mu.Lock()
	l.resetting[key]++
	var dropped []*lease
	for k, ls := range l.leases {
		if k.key != key {
			continue
		}
		for _, lim := range limits {
			if k.limit.Algorithm == lim.Algorithm && k.limit.Period == lim.Period {
				dropped = append(dropped, ls)
				delete(l.leases, k)
				break
			}
		}
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		if l.resetting[key]--; l.resetting[key] == 0 {
			delete(l.resetting, key)
		}
		l.mu.Unlock()
	}()
	for _, ls := range dropped {
		select {
		case ls.lock <- struct{}{}:
		case <-ctx.Done():
			return unavailable(ctx, "reset", ctx.Err())
		}
		ls.dead = true
		<-ls.lock
	}
	return l.store.Reset(ctx, key, limits...)
}

// Close gives the unused units of fixed-window leases back to Redis and
// drops every lease; later checks are plain checks of the Store. It
// returns the errors of the give-backs that failed (those units are lost
// until their window ends). It does not close the Store or its client.
// Calling it again does nothing.
func (l *Leaser) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	all := l.leases
	l.leases = make(map[leaseKey]*lease)
	l.mu.Unlock()

	var errs []error
	for k, ls := range all {
		select {
		case ls.lock <- struct{}{}:
		case <-ctx.Done():
			return errors.Join(append(errs, unavailable(ctx, "lease give-back", ctx.Err()))...)
		}
		ls.dead = true
		n := int64(0)
		if k.limit.Algorithm == ratewarden.FixedWindow {
			n = ls.usable(l.now())
		}
		<-ls.lock
		if n == 0 {
			continue
		}
		args := []string{"give", strconv.FormatInt(ls.ws, 10), strconv.FormatInt(n, 10)}
		if _, err := l.run(ctx, []string{l.store.Key(k.key, k.limit)}, args); err != nil {
			errs = append(errs, unavailable(ctx, "lease give-back", err))
		}
	}
	return errors.Join(errs...)
}

// Leases reports the number of leases held.
func (l *Leaser) Leases() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.leases)
}

var _ ratewarden.Store = (*Leaser)(nil)
