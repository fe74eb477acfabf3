// Package memstore is an in-process ratewarden.Store: the same algorithms
// as the Redis store (internal/algo), with the state held in this process's
// memory. Use it for a single replica, for tests, and as the local share of
// a fallback limiter.
//
// State is kept per (key, limit scope) in a fixed number of shards, each a
// map behind its own mutex; a key's states all live in one shard, so a
// multi-limit check is decided under one lock, atomically. Deciding on an
// existing key does not allocate (a SlidingLog's array grows, up to Rate
// entries, and is then reused).
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
	now    func() time.Time
	maxKey int // longest key in bytes
	closed atomic.Bool
}

type shard struct {
	mu  sync.Mutex
	m   map[stateKey]*entry
	cap int
	_   [40]byte // keep neighbouring shards' mutexes off one cache line
}

// stateKey names one state without building a string per call. The key
// of a stored stateKey is the store's own copy (see insert).
type stateKey struct {
	key    string
	alg    ratewarden.Algorithm
	period time.Duration
}

// entry is one state; which field is used depends on the algorithm.
type entry struct {
	win      algo.Window
	tat      algo.Bucket
	log      algo.Log
	expireAt int64 // µs; the state is equivalent to none from then on
}

type config struct {
	clock       func() time.Time
	maxKeys     int
	maxKeyBytes int
	shards      int
}

// Option configures a Store.
type Option func(*config)

// WithClock makes the store read the time from now instead of time.Now:
// time as a parameter, for deterministic simulations and replays (a model
// that sets each instant, a run over recorded traffic at its own
// timestamps). (The deny cache takes no clock of its own: it reads the
// monotonic time.) A test whose timing fits a testing/synctest bubble
// needs no clock: in the bubble time.Now is the bubble's fake clock. now
// must be safe for concurrent use.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

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
	c := config{clock: time.Now, maxKeys: DefaultMaxKeys, maxKeyBytes: DefaultMaxKeyBytes, shards: DefaultShards}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("memstore: nil Option: %w", ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.clock == nil:
		return nil, fmt.Errorf("memstore: clock must not be nil: %w", ratewarden.ErrInvalidConfig)
	case c.maxKeys < 1:
		return nil, fmt.Errorf("memstore: max keys must be >= 1, got %d: %w", c.maxKeys, ratewarden.ErrInvalidConfig)
	case c.maxKeyBytes < 1:
		return nil, fmt.Errorf("memstore: max key bytes must be >= 1, got %d: %w", c.maxKeyBytes, ratewarden.ErrInvalidConfig)
	case c.shards < 1 || c.shards > MaxShards:
		return nil, fmt.Errorf("memstore: shards must be between 1 and %d, got %d: %w", MaxShards, c.shards, ratewarden.ErrInvalidConfig)
	}
	n := 1 << bits.Len(uint(c.shards-1)) // round up to a power of two
	for n > c.maxKeys {
		n >>= 1
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), now: c.clock, maxKey: c.maxKeyBytes}
	for i := range s.shards {
		s.shards[i].m = make(map[stateKey]*entry)
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
	now := s.now().UnixMicro()
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	consume := req.Cost > 0 && !req.Peek
	if len(req.Limits) == 1 {
		// One limit: its own verdict is the whole verdict, so evaluate and
		// consume in one step.
		res[0] = sh.decide(req.Key, req.Limits[0], now, req.Cost, consume)
		return nil
	}
	all := true
	for i, lim := range req.Limits {
		res[i] = sh.decide(req.Key, lim, now, req.Cost, false)
		all = all && res[i].Allowed
	}
	if all && consume {
		for i, lim := range req.Limits {
			res[i] = sh.decide(req.Key, lim, now, req.Cost, true)
		}
	}
	return nil
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
	sh := s.shard(key)
	sh.mu.Lock()
	for _, lim := range limits {
		delete(sh.m, stateKey{key, lim.Algorithm, lim.Period})
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
		n += len(sh.m)
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
		sh.mu.Unlock()
	}
	return nil
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// decide evaluates one limit for key at now and, when consume is set and
// the limit admits cost, stores the new state. The caller holds sh.mu.
func (sh *shard) decide(key string, lim ratewarden.Limit, now, cost int64, consume bool) ratewarden.Result {
	k := stateKey{key, lim.Algorithm, lim.Period}
	e := sh.m[k]
	if e != nil && e.expireAt <= now {
		// Expired: equivalent to no state. Forget it now rather than
		// carrying it until an insert's sweep finds it.
		delete(sh.m, k)
		e = nil
	}
	var cur entry
	if e != nil {
		cur = *e
	}
	p := algo.FromLimit(lim)
	var o algo.Outcome
	switch lim.Algorithm {
	case ratewarden.FixedWindow:
		cur.win, o = algo.FixedWindow(cur.win, now, p, cost, consume)
	case ratewarden.SlidingWindow:
		cur.win, o = algo.SlidingWindow(cur.win, now, p, cost, consume)
	case ratewarden.TokenBucket:
		cur.tat, o = algo.TokenBucket(cur.tat, now, p, cost, consume)
	default: // SlidingLog; Validate rejected anything else
		cur.log, o = algo.SlidingLog(cur.log, now, p, cost, consume)
	}
	if o.Wrote {
		cur.expireAt = o.ExpireAt
		if e == nil {
			e = sh.insert(k, now)
		}
		*e = cur
	}
	return ratewarden.Result{
		Allowed:    o.Allowed,
		Limit:      lim,
		Remaining:  o.Remaining,
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond,
		Source:     ratewarden.SourceStore,
	}
}

// insert adds a new entry for k, first sweeping a few states for expiry and,
// when the shard is full, evicting one. The map keeps a copy of k's key:
// the caller's string may share its bytes with something much larger (a
// request body the key was sliced from), which the map would otherwise keep
// alive. The caller holds sh.mu.
func (sh *shard) insert(k stateKey, now int64) *entry {
	seen := 0
	for kk, e := range sh.m { // map iteration starts at a random place
		if seen == sweepSize {
			break
		}
		seen++
		if e.expireAt <= now {
			delete(sh.m, kk)
		}
	}
	if len(sh.m) >= sh.cap {
		sh.evict(k.key, now)
	}
	k.key = strings.Clone(k.key)
	e := new(entry)
	sh.m[k] = e
	return e
}

// evict removes every expired state in a random sample, or else the sampled
// state closest to expiry. It spares the states of key (a multi-limit check
// may have just written one), sampling further when it must.
func (sh *shard) evict(key string, now int64) {
	var victim stateKey
	best := int64(-1)
	freed := false
	seen := 0
	for kk, e := range sh.m {
		if seen >= sampleSize && (freed || best >= 0) {
			break
		}
		seen++
		if e.expireAt <= now {
			delete(sh.m, kk)
			freed = true
		} else if kk.key != key && (best < 0 || e.expireAt < best) {
			victim, best = kk, e.expireAt
		}
	}
	if !freed && best >= 0 {
		delete(sh.m, victim)
	}
}
