// Package denycache spares the store the requests of clients that are over
// their limit: a ratewarden.Store decorator that remembers, on this replica,
// every denial the inner store made and answers further checks of the same
// key and limit locally, with Source ratewarden.SourceCache, until the
// denial's RetryAfter has passed.
//
//	st, err := denycache.New(inner)
//	if err != nil {
//		return err
//	}
//	lim, err := ratewarden.New(st)
//
// The recommended Redis stack (package stack) puts one in front of the
// script store by default; use this package directly to put a deny cache
// in front of another Store.
//
// The cache is exact: it only ever denies, and only what the store would
// deny too. A denial of cost n answers later single-limit checks (and
// peeks) of the same key, limit and Rate/Burst with a cost of at least n;
// a smaller cost, cost 0, a multi-limit check and any other limit go to the
// store. Denials made by a failure policy (Result.Degraded) are never
// remembered. A cached denial reports the RetryAfter still to run and the
// Remaining the store reported. Reset through this Store forgets the key's
// denials for those limits, including denials in flight during the Reset.
//
// What it cannot see: a Reset made through another replica (or directly in
// Redis), and capacity another replica gives back (leases, on Close; a
// refund through Charge). Until the remembered RetryAfter has passed, this
// replica may then keep denying a key that the store would admit again. It
// never admits anything the store would deny: every admission comes from
// the store.
//
// Checks whose capacity can come back at any moment are the store's alone:
// a reservation (ratewarden.Request.MaxDelay, Limiter.Wait) or a
// refundable check (Limiter.Reserve), for which Request.Cacheable reports
// false, is never answered from the cache, its denial is never remembered,
// and the per-key gate below does not hold it back. A refund through this
// Store's Charge (Reservation.Settle, a canceled Wait) forgets the key's
// remembered denials under those limits; one made through another replica
// cannot reach this cache, which is why those checks bypass it.
// Concurrency limits (Acquire, Release, Extend) pass through to the inner
// store untouched: a denied Acquire is never remembered, since a release
// frees a permit at any time.
//
// An entry expires by the local monotonic clock, counted from the instant
// just before the store was called, so it never outlives the store's own
// denial, whatever the wall clocks say. The entries live in a bounded
// github.com/maypok86/otter/v2 cache (WithMaxEntries, default
// DefaultMaxEntries); an evicted entry only sends its key's next check to
// the store. The Store starts no goroutines.
//
// A key at the edge of its limit is also kept from flooding the store
// while its first denial is on the way: per key and limit, no more checks
// go to the store at once than it last reported left (one before it has
// reported anything); the others wait for one to come back and look at
// the cache again. Where checks are not batched (a Cluster client) that
// is what keeps a hot key to about one script call per admission.
//
// The Store relies on the ratewarden.Limiter for valid input and does not
// check it again. docs/performance.md has the rules in full and measured
// numbers.
package denycache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/mono"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
)

// DefaultMaxEntries is the default bound on remembered denials.
const DefaultMaxEntries = 100_000

// inner is the Store a Store wraps. Embedded, it lends the Store the
// methods the deny cache does not change (Acquire, Release, Extend).
type inner = ratewarden.Store

// Store is a ratewarden.Store that answers from remembered denials and asks
// its inner store otherwise. Make one with New; it is safe for concurrent
// use.
type Store struct {
	inner
	clock mono.Clock // entries count on it, from New
	cache *otter.Cache[entryKey, entry]
	gate  *gate // holds back a key's checks at the edge of its limit

	// mu orders remembering a denial against Reset: a denial is stored
	// under the read lock only if no Reset began since its check started
	// (gen unchanged); Reset bumps gen and drops entries under the write
	// lock.
	mu  sync.RWMutex
	gen uint64
}

// entryKey names the state a denial is about: a key under a limit scope.
type entryKey struct {
	key    string
	alg    ratewarden.Algorithm
	period time.Duration
}

// entry is one remembered denial: cost or more is denied for limit until
// until (nanoseconds on the Store's clock).
type entry struct {
	limit      ratewarden.Limit
	cost       int64
	until      int64
	resetUntil int64
	remaining  int64
}

// covers reports whether e denies a check of cost under l at now.
func (e *entry) covers(l ratewarden.Limit, cost, now int64) bool {
	return e.limit == l && cost >= e.cost && now < e.until
}

// Option configures a Store. Options only record their value; New
// validates the collected configuration and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting. When an option is
// given twice, the last one counts.
type Option func(*config)

type config struct {
	maxEntries int
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{maxEntries: DefaultMaxEntries}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("denycache: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
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
	if c.maxEntries < 1 {
		return fmt.Errorf("denycache: max entries must be >= 1, got %d: %w", c.maxEntries, ratewarden.ErrInvalidConfig)
	}
	return nil
}

// WithMaxEntries bounds the number of remembered denials (default
// DefaultMaxEntries); it must be at least 1.
func WithMaxEntries(n int) Option { return func(c *config) { c.maxEntries = n } }

// New returns a Store remembering the denials of the store in.
func New(in ratewarden.Store, opts ...Option) (*Store, error) {
	if nilcheck.Is(in) {
		return nil, fmt.Errorf("denycache: inner store must not be nil%s: %w", nilcheck.Describe(in), ratewarden.ErrInvalidConfig)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{inner: in, clock: mono.New(), gate: newGate()}
	cache, err := otter.New(&otter.Options[entryKey, entry]{
		MaximumSize: c.maxEntries,
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[entryKey, entry]) time.Duration {
			return time.Duration(e.Value.until - s.clock.Now())
		}),
		Clock:    otterClock{&s.clock},
		Executor: func(fn func()) { fn() },
	})
	if err != nil {
		return nil, fmt.Errorf("denycache: cache: %w: %w", err, ratewarden.ErrInvalidConfig)
	}
	s.cache = cache
	return s, nil
}

// otterClock is the Store's clock as otter sees it. It never ticks, so
// otter starts no clean-up goroutine; expired entries are dropped as they
// are met and by the upkeep that follows writes.
type otterClock struct{ c *mono.Clock }

func (c otterClock) NowNano() int64                    { return c.c.Now() }
func (otterClock) Tick(time.Duration) <-chan time.Time { return nil }

// Len reports the number of remembered denials, including expired ones not
// yet dropped (an estimate while other calls run).
func (s *Store) Len() int { return s.cache.EstimatedSize() }

// Check implements ratewarden.Store. It answers from a remembered denial
// that covers the request (Source ratewarden.SourceCache), and otherwise
// asks the inner store and remembers the denials in its answer. req must be
// valid and res must have len(req.Limits) elements, as the
// ratewarden.Limiter guarantees; the Store does not check again.
func (s *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if req.Cost == 0 {
		return s.inner.Check(ctx, req, res)
	}
	if !req.Cacheable() {
		// A reservation or a refundable check: only the store decides it,
		// and its denial is not remembered (a refund on any replica can
		// free capacity at any moment). It passes the gate too: waiting
		// for another check's answer would tell it nothing it may use.
		return s.inner.Check(ctx, req, res)
	}

	if len(req.Limits) != 1 {
		return s.ask(ctx, req, res)
	}
	l := req.Limits[0]
	k := entryKey{req.Key, l.Algorithm, l.Period}
	for {
		if s.answer(k, l, req.Cost, res) {
			return nil
		}
		f, w := s.gate.enter(k)
		if f == nil {
			if err := wait(ctx, w); err != nil {
				return err
			}
			continue // a check came back: maybe with a denial to answer from
		}
		err := s.ask(ctx, req, res)
		s.gate.leave(k, f, res[0].Remaining, err == nil && !res[0].Source.Degraded())
		return err
	}
}

// answer fills res from a remembered denial of k that covers a check of
// cost under l, if there is one.
func (s *Store) answer(k entryKey, l ratewarden.Limit, cost int64, res []ratewarden.Result) bool {
	now := s.clock.Now()
	e, ok := s.cache.GetIfPresent(k)
	if !ok || !e.covers(l, cost, now) {
		return false
	}
	retry := time.Duration(e.until - now)
	res[0] = ratewarden.Result{
		Limit:      l,
		Remaining:  e.remaining,
		RetryAfter: retry,
		ResetAfter: max(time.Duration(e.resetUntil-now), retry),
		Source:     ratewarden.SourceCache,
	}
	return true
}

// ask asks the inner store and remembers the denials in its answer.
func (s *Store) ask(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	t := time.Now()
	now := s.clock.At(t)
	s.mu.RLock()
	gen := s.gen
	s.mu.RUnlock()
	if err := s.inner.Check(ctx, req, res); err != nil {
		return err
	}
	// The store decided at or after t. Count the denial from t rounded
	// down to its wall-clock microsecond: a store on the same clock
	// (memstore) truncates its instants so, and for any other store the
	// rounding only moves the end earlier. Either way the entry ends no
	// later than the store's own denial.
	s.learn(req, res, now-int64(t.Nanosecond()%1000), gen)
	return nil
}

// learn remembers the denials in the inner store's answer res, which it
// gave to a check that started at start (the Store's clock) when the Reset
// generation was gen.
func (s *Store) learn(req *ratewarden.Request, res []ratewarden.Result, start int64, gen uint64) {
	remember := false
	for _, r := range res {
		remember = remember || denial(r)
	}
	if !remember {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.gen != gen {
		return // a Reset ran meanwhile: the answer may predate it
	}
	for i, l := range req.Limits {
		r := res[i]
		if !denial(r) {
			continue
		}
		k := entryKey{req.Key, l.Algorithm, l.Period}
		e := entry{
			limit:      l,
			cost:       req.Cost,
			until:      start + int64(r.RetryAfter),
			resetUntil: start + int64(r.ResetAfter),
			remaining:  r.Remaining,
		}
		if old, ok := s.cache.GetIfPresent(k); ok && old.limit == l && old.cost <= e.cost && old.until >= e.until {
			continue // the old entry says more
		}
		s.cache.Set(k, e)
	}
}

// denial reports whether r is a denial worth remembering: made by the store
// (not by a failure policy), with a time to wait.
func denial(r ratewarden.Result) bool {
	return !r.Allowed && r.RetryAfter > 0 && !r.Source.Degraded()
}

// Reset implements ratewarden.Store: it forgets the denials of key under
// limits and resets them in the inner store. Denials of checks still in
// flight are not remembered. key and limits must be valid, as the
// ratewarden.Limiter guarantees.
func (s *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	s.forget(key, limits)
	err := s.inner.Reset(ctx, key, limits...)
	// Checks that started before the inner Reset may answer from the state
	// it removed; bump the generation again so they remember nothing.
	s.forget(key, limits)
	return err
}

func (s *Store) forget(key string, limits []ratewarden.Limit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	for _, l := range limits {
		s.cache.Invalidate(entryKey{key, l.Algorithm, l.Period})
	}
}

// Charge implements ratewarden.Store: it hands the charge on. A charge
// only consumes, so the denials remembered stay true; when any Spent is a
// refund (Units < 0), which frees capacity, the denials of key under the
// scopes of limits are forgotten, as by Reset, whatever the inner store
// answered. A refund made through another replica cannot reach this
// replica's cache: that is why reservations and refundable checks
// (ratewarden.Request.Cacheable false) are never answered from it.
func (s *Store) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	err := s.inner.Charge(ctx, key, limits, spent, applied)
	if refunds(spent) {
		// After the charge: a check that started before it bumps into the
		// new generation and remembers nothing (see learn).
		s.forget(key, limits)
	}
	return err
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
