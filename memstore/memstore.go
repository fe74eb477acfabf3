// Package memstore is an in-process ratewarden.Store: the same algorithms
// as the Redis store (internal/algo), with the state held in this process's
// memory. Use it for a single replica, for tests, and as the local share of
// a fallback limiter.
//
// State is kept per (key, limit scope) in a fixed number of shards, each a
// map behind its own mutex; a key's states all live in one shard, so a
// multi-limit check is decided under one lock, atomically. A check reads
// the clock once (see WithClock), hashes its key once (the hash picks the
// shard and, with each limit's scope, the state) and takes one lock.
// Deciding on an existing key does not allocate (a SlidingLog's array
// grows, up to Rate entries, and is then reused; the store's clock takes a
// new 48-byte base once a second).
//
// Memory is bounded: the store holds at most WithMaxKeys states, and
// refuses keys longer than WithMaxKeyBytes (an error wrapping
// ratewarden.ErrInvalidKey). Expired states are reclaimed lazily (when
// their key is checked) and by a small sampled sweep on every insert. When
// a shard is full, an insert reclaims expired states first and otherwise
// evicts, from a random sample, the state closest to expiry (the one that
// would have been forgotten soonest anyway). A flood of new keys can
// therefore reset the limits of other keys, never grow memory: size
// WithMaxKeys above the number of keys active in one period.
//
// A state costs its key's bytes (the store keeps its own copy) plus about
// 200 bytes, so memory is about MaxKeys × (MaxKeyBytes + 200 B), 1.2 GB
// with the defaults, plus 8 bytes per unit in a SlidingLog's window
// (docs/performance.md, "memstore memory").
//
// Besides checks the store takes reservations (ratewarden.Request's
// MaxDelay, for Limiter.Wait), charges and refunds (ratewarden.Store.Charge,
// for Reservation.Settle) and holds concurrency limits
// (ratewarden.Store.Acquire, for Limiter.Acquire: per key, each holder's
// expiry, in shards of their own, bounded by WithMaxKeys too).
//
// The store starts no goroutines.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
)

// Defaults for New.
const (
	// DefaultMaxKeys is the default bound on stored states.
	DefaultMaxKeys = 1_000_000
	// DefaultMaxKeyBytes is the default bound on a key's length in bytes
	// (1 KiB).
	DefaultMaxKeyBytes = 1024
	// DefaultShards is the default number of shards.
	DefaultShards = 64
	// MaxShards is the largest shard count WithShards accepts.
	MaxShards = 1 << 16
)

// sampleSize is how many states an insert into a full shard looks at to
// choose a victim; sweepSize is how many it checks for expiry otherwise.
const (
	sampleSize = 8
	sweepSize  = 2
)

// Store is an in-process ratewarden.Store. Make one with New; the zero
// Store is not usable. It is safe for concurrent use.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() time.Time // WithClock's, or nil for the store's own clock
	maxKey int              // longest key in bytes
	closed atomic.Bool
	clock  clock
	// permits holds the concurrency limits (Acquire), apart from the
	// rate-limit states.
	permits permits
}

// shard holds the states of the keys that hash to it. It fills two cache
// lines (the unit a core's prefetcher pulls in), so that neighbouring
// shards' locks do not share them.
type shard struct {
	mu  sync.Mutex
	m   map[uint64]*entry // by stateHash; a collision chains through next
	n   int               // states held, len(m) plus chained ones
	cap int
	_   [128 - 32]byte
}

// scope names one state of a key: a limit's algorithm and period.
type scope struct {
	alg    ratewarden.Algorithm
	period time.Duration
}

// shortKey is the longest key an entry holds in itself; a longer key is
// a separate copy. Inline, a lookup reads the key it compares from the
// entry's own memory, and an insert makes one allocation.
const shortKey = 24

// entry is one state, with the name it is stored under: the store's own
// copy of the key (see setKey) and the scope. It is 128 bytes.
type entry struct {
	long  string         // the key, when longer than shortKey bytes
	short [shortKey]byte // the key, when it fits: its first n bytes
	n     uint8
	scope scope
	next  *entry // another state with the same stateHash (rare)
	state
	expireAt int64 // µs; the state is equivalent to none from then on
}

// setKey stores a copy of key in e. The copy matters: the caller's string
// may share its bytes with something much larger (a request body the key
// was sliced from), which the store would otherwise keep alive.
func (e *entry) setKey(key string) {
	if len(key) <= shortKey {
		e.n = uint8(copy(e.short[:], key))
		return
	}
	e.long = strings.Clone(key)
}

// hasKey reports whether e is a state of key.
func (e *entry) hasKey(key string) bool {
	if e.n > 0 {
		return string(e.short[:e.n]) == key // compares in place, no copy
	}
	return e.long == key
}

// state is what an algorithm keeps: w for FixedWindow and SlidingWindow
// (an algo.Window) and TokenBucket (an algo.Bucket: a scope has one
// algorithm, so the two never share a state), log for SlidingLog.
type state struct {
	w   [3]int64
	log algo.Log
}

func (s *state) window() algo.Window     { return algo.Window{Start: s.w[0], Curr: s.w[1], Prev: s.w[2]} }
func (s *state) setWindow(w algo.Window) { s.w = [3]int64{w.Start, w.Curr, w.Prev} }
func (s *state) bucket() algo.Bucket     { return algo.Bucket{T: s.w[0], F: s.w[1]} }
func (s *state) setBucket(b algo.Bucket) { s.w = [3]int64{b.T, b.F, 0} }

// stateHash is the map key of key's state under sc, from h, the hash of key
// (which also chose the shard). Distinct scopes of one key get distinct
// hashes: (period, algorithm) maps one to one onto the multiplier's input,
// and an odd multiplier is a bijection.
func stateHash(h uint64, sc scope) uint64 {
	return h ^ (uint64(sc.period)<<2|uint64(sc.alg))*0x9e3779b97f4a7c15
}

// clock is the store's own reading of the system clock, cheaper than
// time.Now per call: a base from time.Now, renewed when it is resync old,
// plus the monotonic time elapsed since it (time.Since reads only the
// monotonic clock, one clock read instead of time.Now's two). Between
// renewals it therefore follows the monotonic clock, which on Linux the
// NTP daemon slews like the wall clock; a step of the wall clock reaches
// the store within resync. In a testing/synctest bubble time.Now and
// time.Since read the bubble's fake clock and carry no monotonic reading,
// so the sum is the bubble's time, exactly.
type clock struct{ base atomic.Pointer[clockBase] }

// clockBase is one reading of time.Now: t, t's Unix time in whole
// microseconds, and its nanoseconds beyond them.
type clockBase struct {
	t   time.Time
	us  int64
	sub int64 // 0 to 999
}

// resync is the age at which clock takes a new base.
const resync = time.Second

// nowMicro returns the current Unix time in microseconds, as
// time.Now().UnixMicro() does.
func (c *clock) nowMicro() int64 {
	if b := c.base.Load(); b != nil {
		if d := time.Since(b.t); d >= 0 && d < resync {
			return b.us + (b.sub+int64(d))/1e3
		}
	}
	t := time.Now()
	b := &clockBase{t: t, us: t.UnixMicro(), sub: int64(t.Nanosecond() % 1e3)}
	c.base.Store(b)
	return b.us
}

// Option configures a Store. Options only record their value; New
// validates the collected configuration and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting. When an option is
// given twice, the last one counts.
type Option func(*config)

type config struct {
	clock       func() time.Time // nil: the store's own clock
	clockSet    bool
	maxKeys     int
	maxKeyBytes int
	shards      int
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{maxKeys: DefaultMaxKeys, maxKeyBytes: DefaultMaxKeyBytes, shards: DefaultShards}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("memstore: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
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
	case c.clockSet && c.clock == nil:
		detail = "clock must not be nil"
	case c.maxKeys < 1:
		detail = fmt.Sprintf("max keys must be >= 1, got %d", c.maxKeys)
	case c.maxKeyBytes < 1:
		detail = fmt.Sprintf("max key bytes must be >= 1, got %d", c.maxKeyBytes)
	case c.shards < 1 || c.shards > MaxShards:
		detail = fmt.Sprintf("shards must be between 1 and %d, got %d", MaxShards, c.shards)
	default:
		return nil
	}
	return fmt.Errorf("memstore: %s: %w", detail, ratewarden.ErrInvalidConfig)
}

// WithClock makes the store read the time from now: time as a parameter,
// for deterministic simulations and replays (a model that sets each
// instant, a run over recorded traffic at its own timestamps). now must
// be safe for concurrent use and must not be nil.
//
// Without it the store reads the system clock itself, more cheaply than
// calling time.Now per check: time.Now at most once a second, and in
// between the monotonic time elapsed since, so a step of the system clock
// takes effect within a second. A test whose timing fits a
// testing/synctest bubble needs no clock either: in the bubble the store
// reads the bubble's fake clock. (The deny cache takes no clock of its
// own: it reads the monotonic time.)
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clock, c.clockSet = now, true }
}

// WithMaxKeys bounds the number of states the store holds (one per key and
// limit scope); the default is DefaultMaxKeys. The bound is split evenly
// over the shards. See the package doc for what happens when the store is
// full. A check never evicts its own key's states, so a shard whose share
// is smaller than the limits of one check holds that key's states anyway.
func WithMaxKeys(n int) Option { return func(c *config) { c.maxKeys = n } }

// WithMaxKeyBytes bounds the length of a key in bytes; the default is
// DefaultMaxKeyBytes (1 KiB), and n must be at least 1. Check and Reset of
// a longer key return an error wrapping ratewarden.ErrInvalidKey that
// names the bound and the key's length (not the key) and change nothing.
// With WithMaxKeys it bounds the store's memory (see the package doc).
// Keys are compared byte for byte: a caller with longer identifiers can
// hash them to a fixed length first.
func WithMaxKeyBytes(n int) Option { return func(c *config) { c.maxKeyBytes = n } }

// WithShards sets the number of shards (rounded up to a power of two, at
// most MaxShards; default DefaultShards). More shards mean less lock
// contention across keys. A store bounded to fewer keys than shards uses
// fewer shards.
func WithShards(n int) Option { return func(c *config) { c.shards = n } }

// New returns an empty Store.
func New(opts ...Option) (*Store, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	n := 1 << bits.Len(uint(c.shards-1)) // round up to a power of two
	for n > c.maxKeys {
		n >>= 1
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), now: c.clock, maxKey: c.maxKeyBytes}
	s.permits.init(c.maxKeys)
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
		s.shards[i].cap = c.maxKeys / n
		if i < c.maxKeys%n {
			s.shards[i].cap++
		}
	}
	return s, nil
}

var errClosed = fmt.Errorf("memstore: store is closed: %w", ratewarden.ErrStoreUnavailable)

// keyTooLong is the error for a key of n bytes, over the WithMaxKeyBytes
// bound. It names the lengths only: the key may be anything a client sent.
func (s *Store) keyTooLong(n int) error {
	return fmt.Errorf("memstore: key is %d bytes, longer than the %d-byte limit (WithMaxKeyBytes): %w", n, s.maxKey, ratewarden.ErrInvalidKey)
}

// Check implements ratewarden.Store. req must be valid and res must have
// len(req.Limits) elements, as a ratewarden.Limiter guarantees (see
// ratewarden.Request); Check does not validate them again, and a caller
// that builds Requests itself checks them with ratewarden.ValidateRequest.
// A key longer than WithMaxKeyBytes is the one input Check refuses itself
// (the store bounds its memory by it): an error wrapping
// ratewarden.ErrInvalidKey, and nothing is stored.
// ctx is not consulted: Check never waits for anything but a shard's lock.
func (s *Store) Check(_ context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if len(req.Key) > s.maxKey {
		return s.keyTooLong(len(req.Key))
	}
	if s.closed.Load() {
		return errClosed
	}
	now := s.nowMicro()
	h := maphash.String(s.seed, req.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	consume := req.Cost > 0 && !req.Peek
	if req.MaxDelay > 0 && allBuckets(req.Limits) {
		sh.reserve(req, res, h, now)
		return nil
	}
	if len(req.Limits) == 1 {
		var o algo.Outcome
		sh.decideOne(&o, h, req.Key, req.Limits[0], now, req.Cost, consume)
		storeResult(&res[0], req.Limits[0], &o)
		return nil
	}
	// Evaluate every limit, then consume from every one if all admit. The
	// states found in the first pass stay valid for the second: the first
	// removes the expired ones, and an insert in the second sweeps only
	// expired states and evicts none of this key's.
	var buf [8]*entry
	found := buf[:0]
	all := true
	for i, lim := range req.Limits {
		sc := scope{lim.Algorithm, lim.Period}
		hash := stateHash(h, sc)
		var o algo.Outcome
		found = append(found, sh.decide(&o, sh.find(hash, req.Key, sc), hash, req.Key, lim, now, req.Cost, false))
		storeResult(&res[i], lim, &o)
		all = all && o.Allowed
	}
	if all && consume {
		for i, lim := range req.Limits {
			var o algo.Outcome
			sh.decide(&o, found[i], stateHash(h, scope{lim.Algorithm, lim.Period}), req.Key, lim, now, req.Cost, true)
			storeResult(&res[i], lim, &o)
		}
	}
	return nil
}

// CheckOne implements ratewarden.SingleChecker: Check for one limit,
// without the Request and result slice (the Limiter's path for Allow).
func (s *Store) CheckOne(_ context.Context, key string, lim ratewarden.Limit, cost int64, peek bool) (r ratewarden.Result, err error) {
	if len(key) > s.maxKey {
		return ratewarden.Result{}, s.keyTooLong(len(key))
	}
	if s.closed.Load() {
		return ratewarden.Result{}, errClosed
	}
	now := s.nowMicro()
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	var o algo.Outcome
	sh.mu.Lock()
	sh.decideOne(&o, h, key, lim, now, cost, cost > 0 && !peek)
	sh.mu.Unlock()
	storeResult(&r, lim, &o)
	return r, nil
}

// decideOne decides one limit, its own verdict being the whole verdict:
// evaluate and consume in one step. The caller holds sh.mu; h is the hash
// of key.
func (sh *shard) decideOne(o *algo.Outcome, h uint64, key string, lim ratewarden.Limit, now, cost int64, consume bool) {
	sc := scope{lim.Algorithm, lim.Period}
	hash := stateHash(h, sc)
	sh.decide(o, sh.find(hash, key, sc), hash, key, lim, now, cost, consume)
}

// nowMicro is the store's time in Unix microseconds: WithClock's, or its
// own clock's.
func (s *Store) nowMicro() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.clock.nowMicro()
}

// Reset implements ratewarden.Store: it deletes key's states under limits.
// Like Check it relies on the Limiter's validation of key and limits, and
// refuses a key longer than WithMaxKeyBytes (no such state can exist).
func (s *Store) Reset(_ context.Context, key string, limits ...ratewarden.Limit) error {
	if len(key) > s.maxKey {
		return s.keyTooLong(len(key))
	}
	if s.closed.Load() {
		return errClosed
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	for _, lim := range limits {
		sc := scope{lim.Algorithm, lim.Period}
		if e := sh.find(stateHash(h, sc), key, sc); e != nil {
			sh.remove(stateHash(h, sc), e)
		}
	}
	sh.mu.Unlock()
	return nil
}

// Len reports the number of states held, including expired ones not yet
// reclaimed. It is at most the WithMaxKeys bound.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Close drops all states; later calls to Check and Reset fail with an error
// wrapping ratewarden.ErrStoreUnavailable. It is safe to call more than
// once and always returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.n = 0
		sh.mu.Unlock()
	}
	for i := range s.permits.shards {
		sh := &s.permits.shards[i]
		sh.mu.Lock()
		clear(sh.keys)
		sh.mu.Unlock()
	}
	return nil
}

// find returns key's state under sc, stored at hash sh, or nil. The caller
// holds sh.mu.
func (sh *shard) find(hash uint64, key string, sc scope) *entry {
	for e := sh.m[hash]; e != nil; e = e.next {
		if e.scope == sc && e.hasKey(key) {
			return e
		}
	}
	return nil
}

// remove unlinks e, stored at hash. The caller holds sh.mu.
func (sh *shard) remove(hash uint64, e *entry) {
	head := sh.m[hash]
	switch {
	case head == e && e.next == nil:
		delete(sh.m, hash)
	case head == e:
		sh.m[hash] = e.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == e {
				p.next = e.next
				break
			}
		}
	}
	e.next = nil
	sh.n--
}

// decide evaluates one limit for key at now into o and, when consume is
// set and the limit admits cost, stores the new state. e is key's state
// under lim (nil for none), stored at hash. decide returns the state that
// holds key's state afterwards, or nil when there is none (an expired
// state is removed unless it is written again). The caller holds sh.mu;
// storeResult makes o a Result, which needs no lock.
func (sh *shard) decide(o *algo.Outcome, e *entry, hash uint64, key string, lim ratewarden.Limit, now, cost int64, consume bool) *entry {
	// An expired state is equivalent to none: start from zero words (and
	// an empty log that keeps its array for reuse). The words are held in
	// scalars, not an array, so that they stay in registers.
	live := e != nil && e.expireAt > now
	var w0, w1, w2 int64
	if live {
		w0, w1, w2 = e.w[0], e.w[1], e.w[2]
	}
	p := algo.FromLimit(lim)
	var log algo.Log
	switch lim.Algorithm {
	case ratewarden.FixedWindow:
		nw := algo.FixedWindowInto(o, algo.Window{Start: w0, Curr: w1, Prev: w2}, now, p, cost, consume)
		w0, w1, w2 = nw.Start, nw.Curr, nw.Prev
	case ratewarden.SlidingWindow:
		nw := algo.SlidingWindowInto(o, algo.Window{Start: w0, Curr: w1, Prev: w2}, now, p, cost, consume)
		w0, w1, w2 = nw.Start, nw.Curr, nw.Prev
	case ratewarden.TokenBucket:
		b := algo.TokenBucketInto(o, algo.Bucket{T: w0, F: w1}, now, p, cost, consume)
		w0, w1, w2 = b.T, b.F, 0
	default: // SlidingLog; Validate rejected anything else
		if e != nil {
			log = e.log
			if !live {
				log = log[:0]
			}
		}
		log = algo.SlidingLogInto(o, log, now, p, cost, consume)
	}
	switch {
	case o.Wrote:
		if e == nil {
			e = sh.insert(hash, key, scope{lim.Algorithm, lim.Period}, now)
		}
		// Only a log holds a pointer: the other states are stored without
		// touching it (and without a write barrier).
		if lim.Algorithm == ratewarden.SlidingLog {
			e.log = log
		}
		e.w[0], e.w[1], e.w[2], e.expireAt = w0, w1, w2, o.ExpireAt
	case e != nil && !live:
		// Forget it now rather than carrying it until a sweep finds it.
		sh.remove(hash, e)
		e = nil
	}
	return e
}

// storeResult sets *r to the Result of lim's outcome o. It clears r and
// sets field by field: a composite literal goes through a temporary the
// compiler then copies with wide loads, which stall on the narrow stores
// just made.
func storeResult(r *ratewarden.Result, lim ratewarden.Limit, o *algo.Outcome) {
	*r = ratewarden.Result{}
	r.Allowed = o.Allowed
	r.Limit = lim
	r.Remaining = o.Remaining
	r.RetryAfter = time.Duration(o.RetryAfter) * time.Microsecond
	r.ResetAfter = time.Duration(o.ResetAfter) * time.Microsecond
	r.Delay = time.Duration(o.Delay) * time.Microsecond
	r.Source = ratewarden.SourceStore
}

// insert adds a new, empty state for key under sc at hash, first sweeping
// a few states for expiry and, when the shard is full, evicting one. The
// state keeps its own copy of key (setKey). The caller holds sh.mu.
func (sh *shard) insert(hash uint64, key string, sc scope, now int64) *entry {
	seen := 0
	for hh, e := range sh.m { // map iteration starts at a random place
		if seen == sweepSize {
			break
		}
		seen++
		sh.dropExpired(hh, e, now)
	}
	if sh.n >= sh.cap {
		sh.evict(key, now)
	}
	e := &entry{scope: sc, next: sh.m[hash]}
	e.setKey(key)
	sh.m[hash] = e
	sh.n++
	return e
}

// dropExpired removes the states of the chain head, stored at hash, that
// have expired by now, and reports whether it removed any. The caller holds
// sh.mu.
func (sh *shard) dropExpired(hash uint64, head *entry, now int64) bool {
	freed := false
	for e := head; e != nil; {
		next := e.next
		if e.expireAt <= now {
			sh.remove(hash, e)
			freed = true
		}
		e = next
	}
	return freed
}

// evict removes every expired state in a random sample, or else the sampled
// state closest to expiry. It spares the states of key (a multi-limit check
// may have just written one), sampling further when it must.
func (sh *shard) evict(key string, now int64) {
	var victim *entry
	var victimHash uint64
	freed := false
	seen := 0
	for hh, head := range sh.m {
		if seen >= sampleSize && (freed || victim != nil) {
			break
		}
		seen++
		if sh.dropExpired(hh, head, now) {
			freed = true
			continue
		}
		for e := head; e != nil; e = e.next {
			if !e.hasKey(key) && (victim == nil || e.expireAt < victim.expireAt) {
				victim, victimHash = e, hh
			}
		}
	}
	if !freed && victim != nil {
		sh.remove(victimHash, victim)
	}
}
