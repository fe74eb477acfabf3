package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
	"github.com/ratewarden/ratewarden/internal/mono"
	"github.com/ratewarden/ratewarden/redisstore"
)

// Defaults for New.
const (
	// DefaultSize is the number of units a lease asks for.
	DefaultSize = 20
	// DefaultMaxLeases bounds the leases a Store holds (one per key and
	// limit).
	DefaultMaxLeases = 10_000
)

// inner is the script store a Store wraps. Embedded, it lends the Store
// the methods leases do not change (Acquire, Release, Extend: a permit is
// held until released, not spent, so it is never leased).
type inner = ratewarden.Store

// Store is a ratewarden.Store deciding checks of hot keys from leased
// capacity (see the package doc), and every other check through the
// *redisstore.Store it wraps. It is safe for concurrent use.
type Store struct {
	inner
	lender *redisstore.Lender
	size   int64
	filter func(ratewarden.Limit) bool
	max    int
	clock  mono.Clock // the leases' instants (ns) count on it

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
	t0      int64 // ns on the Store's clock just before that call
	// FixedWindow: units are usable while now < end; window is the
	// window's start (Redis' clock) for Close.
	end    int64
	window time.Time
	// TokenBucket: unit j is usable until t0 + local(first + j·P/rate).
	firstUs  int64
	periodUs int64
	rate     int64
	resetAt  int64 // ns: when the bucket is full again, as far as known

	deniedNeed  int64 // a script call denied this many units ...
	deniedUntil int64 // ... until then (ns); 0: no denial remembered
	// refunded is set by a refund through Charge (without the lock): the
	// next check forgets the remembered denial, which may predate it.
	refunded atomic.Bool

	// shared is what Redis had left beyond this lease at the last script
	// call: local answers report it in Remaining with the leased units.
	shared int64
}

// Option configures a Store. Options only record their value; New
// validates the collected configuration and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting. When an option is
// given twice, the last one counts.
type Option func(*config)

type config struct {
	size   int64
	filter func(ratewarden.Limit) bool
	max    int
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{size: DefaultSize, filter: func(ratewarden.Limit) bool { return true }, max: DefaultMaxLeases}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("lease: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

// validate reports the first setting out of its range, by name.
func (c *config) validate() error {
	var detail string
	switch {
	case c.size < 1:
		detail = fmt.Sprintf("size must be at least 1, got %d", c.size)
	case c.filter == nil:
		detail = "filter must not be nil"
	case c.max < 1:
		detail = fmt.Sprintf("max leases must be at least 1, got %d", c.max)
	default:
		return nil
	}
	return fmt.Errorf("lease: %s: %w", detail, ratewarden.ErrInvalidConfig)
}

// WithSize sets the number of units a lease asks for (default
// DefaultSize); a check that needs more asks for what it needs. It must be
// at least 1. Bigger leases mean fewer Redis calls and more units idle in
// replicas' leases.
func WithSize(n int64) Option { return func(c *config) { c.size = n } }

// WithFilter selects the limits that use leases: those for which f
// reports true (default: every FixedWindow and TokenBucket limit). Limits
// of other algorithms are never leased, whatever f says. f must be safe
// for concurrent use.
func WithFilter(f func(ratewarden.Limit) bool) Option {
	return func(c *config) { c.filter = f }
}

// WithMaxLeases bounds the number of leases held, one per key and limit
// (default DefaultMaxLeases); at least 1. When full, a new key drops a
// lease with no usable units, or else any idle lease, whose units are then
// lost until their window ends.
func WithMaxLeases(n int) Option { return func(c *config) { c.max = n } }

// New returns a Store deciding with leases on the Redis of store, which
// must have been made by redisstore.New or redisstore.NewGoRedis.
func New(store *redisstore.Store, opts ...Option) (*Store, error) {
	if store == nil {
		return nil, fmt.Errorf("lease: store must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	lender, err := redisstore.NewLender(store)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return &Store{
		inner: store, lender: lender, size: c.size, filter: c.filter, max: c.max,
		clock: mono.New(), leases: make(map[leaseKey]*lease), resetting: make(map[string]int),
	}, nil
}

// leasable reports whether checks of lim use leases.
func (l *Store) leasable(lim ratewarden.Limit) bool {
	return (lim.Algorithm == ratewarden.FixedWindow || lim.Algorithm == ratewarden.TokenBucket) && l.filter(lim)
}

// Check implements ratewarden.Store; see the package doc for which checks
// use leases. req must be valid and res must have len(req.Limits)
// elements, as the ratewarden.Limiter guarantees.
func (l *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if len(req.Limits) != 1 || req.Cost == 0 || !req.Cacheable() || !l.leasable(req.Limits[0]) {
		// Reservations and refundable checks are Redis' alone: a refund on
		// any replica can free capacity a lease or a remembered denial
		// here knows nothing of.
		return l.inner.Check(ctx, req, res)
	}
	for range 3 { // a lease dropped meanwhile: look again, then go plain
		ls := l.get(req.Key, req.Limits[0])
		if ls == nil {
			break
		}
		select {
		case ls.lock <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("lease: wait for the lease of %s: %w: %w", req.Limits[0].Scope(), ratewarden.ErrStoreUnavailable, ctx.Err())
		}
		if ls.dead {
			<-ls.lock
			continue
		}
		err := l.decide(ctx, ls, req, &res[0])
		<-ls.lock
		return err
	}
	return l.inner.Check(ctx, req, res)
}

// get returns the lease of key under lim, made if needed, or nil when the
// key is being reset or the Store is closed.
func (l *Store) get(key string, lim ratewarden.Limit) *lease {
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

// evictSample bounds the leases evict looks at, so that a full Store does
// not scan them all, under l.mu, for every new key. Map iteration order is
// random, so the sample is too.
const evictSample = 32

// evict drops one lease, preferring one with nothing usable among a random
// sample. Leases that a check holds are skipped; if every lease looked at
// is busy, nothing is dropped and the bound is exceeded by at most the
// checks in flight. l.mu is held.
func (l *Store) evict() {
	now := l.clock.Now()
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
	return ls.t0 + local(time.Duration(us)*time.Microsecond)
}

// local converts a duration on Redis' clock (from the instant a call
// began) to one on the local clock (ns), shortened by 1/1024 so that a
// local clock running up to ~0.1% fast or slow against Redis' stays on the
// safe side.
func local(d time.Duration) int64 {
	ns := int64(d)
	return ns - ns/1024
}

// decide answers req (one leased limit, cost > 0) with ls locked.
func (l *Store) decide(ctx context.Context, ls *lease, req *ratewarden.Request, r *ratewarden.Result) error {
	lim := req.Limits[0]
	now := l.clock.Now()
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
	if ls.refunded.Swap(false) {
		ls.deniedUntil = 0
	}
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
		if err := l.inner.Check(ctx, &pr, out[:]); err != nil {
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
	g, err := l.lender.Take(ctx, req.Key, lim, need, max(l.size, need))
	if err != nil {
		return err
	}
	ls.shared = g.Remaining
	ls.resetAt = now + local(g.ResetAfter)
	if g.Units == 0 {
		ls.deniedNeed, ls.deniedUntil = need, now+local(g.RetryAfter)
		*r = ratewarden.Result{Limit: lim, Remaining: avail + g.Remaining, RetryAfter: g.RetryAfter, ResetAfter: g.ResetAfter}
		return nil
	}
	// The units left in the old lease (avail) and need new ones make up
	// this check (a fixed window: need is the whole cost); the rest of the
	// new lease is for the checks to come.
	ls.deniedUntil = 0
	ls.granted, ls.next, ls.t0 = g.Units, need, now
	if fixed {
		if g.Window.Equal(ls.window) {
			ls.granted += avail // same window: the leftovers still count
		}
		ls.periodUs = 0
		ls.end = now + local(g.ResetAfter) // the window's end
		ls.window = g.Window
	} else {
		ls.firstUs, ls.periodUs, ls.rate = g.Due.Microseconds(), lim.Period.Microseconds(), lim.Rate
	}
	*r = ratewarden.Result{Allowed: true, Limit: lim, Remaining: ls.granted - ls.next + g.Remaining, ResetAfter: g.ResetAfter}
	return nil
}

// Reset implements ratewarden.Store: it drops this Store's leases of key
// under limits (any rate of their scopes), waits for checks using them,
// and resets the key in Redis. Checks of key meanwhile are plain. key and
// limits must be valid, as the ratewarden.Limiter guarantees.
func (l *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
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
			return fmt.Errorf("lease: reset: wait for a check using the lease: %w: %w", ratewarden.ErrStoreUnavailable, ctx.Err())
		}
		ls.dead = true
		<-ls.lock
	}
	return l.inner.Reset(ctx, key, limits...)
}

// Close gives the unused units of fixed-window leases back to Redis and
// drops every lease; later checks are plain checks of the wrapped Store.
// It returns the errors of the give-backs that failed (those units are
// lost until their window ends). When ctx ends first, Close stops there:
// the leases it has not reached are dropped without giving back (their
// units are lost, as on a crash: under-admission, never over), and a check
// already holding one may still spend its units. It does not close the
// wrapped Store or its client. Calling it again does nothing.
func (l *Store) Close(ctx context.Context) error {
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
			return errors.Join(append(errs, fmt.Errorf("lease: close: %w: %w", ratewarden.ErrStoreUnavailable, ctx.Err()))...)
		}
		ls.dead = true
		n := int64(0)
		if k.limit.Algorithm == ratewarden.FixedWindow {
			n = ls.usable(l.clock.Now())
		}
		<-ls.lock
		if n == 0 {
			continue
		}
		if _, err := l.lender.GiveBack(ctx, k.key, k.limit, ls.window, n); err != nil {
			errs = append(errs, fmt.Errorf("lease: close: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Leases reports the number of leases held.
func (l *Store) Leases() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.leases)
}

// Charge implements ratewarden.Store on Redis (redisstore.Store.Charge):
// units spent elsewhere count in the shared state. Units already leased to
// this replica stay leased: they were taken from the same count, so a
// charge only makes Redis deny sooner. A refund (Units < 0) gives capacity
// back in Redis; this replica then forgets the denial it remembered for
// key under each of limits (the same limit, not merely its scope), so the
// next check asks Redis. A refund made through another replica cannot
// reach this one, which is why reservations and refundable checks never
// use leases.
func (l *Store) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	err := l.inner.Charge(ctx, key, limits, spent, applied)
	if refunds(spent) {
		l.mu.RLock()
		for _, lim := range limits {
			if ls := l.leases[leaseKey{key, lim}]; ls != nil {
				ls.refunded.Store(true)
			}
		}
		l.mu.RUnlock()
	}
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// refunds reports whether spent gives any units back.
func refunds(spent []ratewarden.Spent) bool {
	for _, sp := range spent {
		if sp.Units < 0 {
			return true
		}
	}
	return false
}

var _ ratewarden.Store = (*Store)(nil)
