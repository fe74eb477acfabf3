package fallback

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
)

// rounds makes the breaker count round trips, not calls. Calls in flight
// together share their fate: one stalled pipeline or batched script call
// times out every check riding on it at once, and those failures are one
// piece of evidence, not dozens. So an outcome counts only when no other
// outcome was counted while its call was in flight: the first call of a
// round trip to finish speaks for the calls that started before it
// finished. Calls made one after the other all count.
type rounds struct {
	n atomic.Uint64 // outcomes counted so far
}

// begin is taken when a call starts.
func (r *rounds) begin() uint64 { return r.n.Load() }

// first reports whether the outcome of a call that began at b counts, and
// if so counts it.
func (r *rounds) first(b uint64) bool { return r.n.CompareAndSwap(b, b+1) }

// keyStateLogEvery spaces the log lines about keys whose state is unusable.
const keyStateLogEvery = 10 * time.Second

// keyStates counts the checks that found a key's state unusable
// (ratewarden.ErrKeyState) and logs them at most once per keyStateLogEvery,
// without the keys.
type keyStates struct {
	n        atomic.Int64
	reported atomic.Int64 // n at the last log line
	logged   atomic.Int64 // since() of the last log line, 0 for none
}

func (k *keyStates) note(s *Store) {
	n := k.n.Add(1)
	now := s.since(time.Now())
	last := k.logged.Load()
	if last != 0 && now-last < int64(keyStateLogEvery) || !k.logged.CompareAndSwap(last, max(now, 1)) {
		return
	}
	prev := k.reported.Swap(n)
	s.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn,
		"fallback: checks found a key holding another type or a malformed state (another program writing under the prefix?); "+
			"they were answered by the failure policy, other keys are not affected; Reset repairs a key",
		slog.String("store", s.cfg.name),
		slog.Int64("checks", n-prev),
		slog.String("policy", s.cfg.policy.String()))
}

// KeyStateErrors returns how many checks found their key's state unusable
// (ratewarden.ErrKeyState) and were answered by the failure policy. Those
// keys are never named, in logs or here.
func (s *Store) KeyStateErrors() int64 { return s.keyStates.n.Load() }

// Write-back of LocalFallback admissions. While the primary is out, every
// replica admits its share of a limit locally; when it is back, the
// replica charges what it admitted (ratewarden.Charger) into the shared
// state, so that a window open across the outage counts both. Admissions
// are journaled per key and limits in spans of at most spanOf(limits),
// each charged at its latest admission: a unit is never dated earlier than
// it was admitted, which could let it drop out of its window too soon.

// DefaultReconcileKeys is how many keys' LocalFallback admissions a Store
// keeps to write back, at most (WithReconcileKeys).
const DefaultReconcileKeys = 10_000

// maxSpans bounds one key's journal; later admissions join the last span.
const maxSpans = 32

type span struct {
	at    int64 // since() of the latest admission in the span
	units int64
}

type jentry struct {
	key    string
	limits []ratewarden.Limit // the limits, not the local shares
	spans  []span
	grain  int64 // spanOf(limits)
}

type journal struct {
	mu      sync.Mutex
	max     int
	entries map[string]*jentry // by key and limits
	order   []*jentry          // oldest first
	dropped int64              // units not journaled: the journal was full

	running atomic.Bool // a write-back is under way
}

func (j *journal) init(maxKeys int) {
	j.max = maxKeys
	j.entries = make(map[string]*jentry)
}

// spanOf is how long one span of a journal entry may cover: a 64th of the
// shortest period, at least a millisecond.
func spanOf(limits []ratewarden.Limit) int64 {
	p := limits[0].Period
	for _, l := range limits[1:] {
		p = min(p, l.Period)
	}
	return int64(max(p/64, time.Millisecond))
}

func journalKey(key string, limits []ratewarden.Limit) string {
	var b strings.Builder
	b.WriteString(key)
	for _, l := range limits {
		b.WriteByte(0)
		b.WriteString(l.Algorithm.String())
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(l.Rate, 10))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(int64(l.Period), 10))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	return b.String()
}

// recordLocal journals the admission sc decided locally for req, under the
// limits that LocalFallback answered.
func (s *Store) recordLocal(req *ratewarden.Request, sc *scratch) {
	for _, r := range sc.res {
		if !r.Allowed {
			return
		}
	}
	limits := make([]ratewarden.Limit, len(sc.idx))
	for j, i := range sc.idx {
		limits[j] = req.Limits[i]
	}
	s.journal.add(req.Key, limits, req.Cost, s.since(time.Now()))
}

func (j *journal) add(key string, limits []ratewarden.Limit, units, now int64) {
	jk := journalKey(key, limits)
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.entries[jk]
	if e == nil {
		if len(j.entries) >= j.max {
			j.dropped += units
			return
		}
		e = &jentry{key: strings.Clone(key), limits: limits, grain: spanOf(limits)}
		j.entries[jk] = e
		j.order = append(j.order, e)
	}
	if n := len(e.spans); n > 0 && (now-e.spans[n-1].at < e.grain || n == maxSpans) {
		e.spans[n-1].units += units
		e.spans[n-1].at = now
		return
	}
	e.spans = append(e.spans, span{at: now, units: units})
}

// forget drops key's journal entries (Reset).
func (j *journal) forget(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.entries) == 0 {
		return
	}
	j.order = slices.DeleteFunc(j.order, func(e *jentry) bool {
		if e.key != key {
			return false
		}
		delete(j.entries, journalKey(e.key, e.limits))
		return true
	})
}

// take removes and returns the whole journal, oldest entry first, and the
// units it could not hold since the last take.
func (j *journal) take() ([]*jentry, int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out, dropped := j.order, j.dropped
	j.order, j.dropped = nil, 0
	clear(j.entries)
	return out, dropped
}

// putBack returns entries a write-back could not finish to the journal,
// ahead of what was journaled since (they are older), merging with entries
// of the same key and limits.
func (j *journal) putBack(entries []*jentry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var kept []*jentry
	for _, e := range entries {
		jk := journalKey(e.key, e.limits)
		if cur := j.entries[jk]; cur != nil {
			cur.spans = mergeSpans(e.spans, cur.spans)
			continue
		}
		if len(j.entries) >= j.max {
			for _, sp := range e.spans {
				j.dropped += sp.units
			}
			continue
		}
		j.entries[jk] = e
		kept = append(kept, e)
	}
	j.order = append(kept, j.order...)
}

// mergeSpans puts older before newer, keeping at most maxSpans (the rest
// join the last).
func mergeSpans(older, newer []span) []span {
	out := append(slices.Clip(older), newer...)
	if len(out) > maxSpans {
		last := out[len(out)-1]
		for _, sp := range out[maxSpans-1 : len(out)-1] {
			last.units += sp.units
		}
		out = append(out[:maxSpans-1], last)
	}
	return out
}

// reconcileTimeout bounds one write-back script call.
const reconcileTimeout = time.Second

// ErrRecovering is the cause of degraded decisions for a key this replica
// admitted locally during an outage, for a grace period after the primary
// came back (see grace). It wraps nothing: the primary is fine.
var ErrRecovering = errors.New("fallback: primary back; the key stays on its local share while every replica writes its outage admissions back")

// grace is how long after the breaker closed a key journaled during the
// outage stays on its local share (WithGrace): long enough for every
// replica's breaker to close too and write its own admissions back.
// Deciding on the primary sooner would admit units the others'
// write-backs are about to count.
func (s *Store) grace() time.Duration { return s.cfg.grace }

// pins holds the keys under grace.
type pins struct {
	until atomic.Int64 // since() the grace ends; 0: no key is pinned
	mu    sync.RWMutex
	keys  map[string]struct{}
}

// pinned reports whether key is under grace. Outside grace periods it
// costs one atomic load.
func (s *Store) pinned(key string) bool {
	until := s.pins.until.Load()
	if until == 0 || s.since(time.Now()) >= until {
		return false
	}
	s.pins.mu.RLock()
	_, ok := s.pins.keys[key]
	s.pins.mu.RUnlock()
	return ok
}

func (s *Store) pin(entries []*jentry) {
	s.pins.mu.Lock()
	defer s.pins.mu.Unlock()
	if s.pins.keys == nil {
		s.pins.keys = make(map[string]struct{})
	}
	for _, e := range entries {
		s.pins.keys[e.key] = struct{}{}
	}
	s.pins.until.Store(s.since(time.Now().Add(s.grace())))
}

func (s *Store) unpin() {
	s.pins.mu.Lock()
	defer s.pins.mu.Unlock()
	s.pins.until.Store(0)
	clear(s.pins.keys)
}

// startReconcile writes the journal back on a goroutine of its own, unless
// one is already at it or there is nothing to write. It runs when the
// breaker has closed again: it pins the journaled keys for the grace
// period, charges them, and when the grace ends unpins them and writes
// back what they admitted meanwhile. Nothing of it outlives that.
func (s *Store) startReconcile() {
	if s.charger == nil || !s.journal.running.CompareAndSwap(false, true) {
		return
	}
	entries, dropped := s.journal.take()
	if len(entries) == 0 && dropped == 0 {
		s.journal.running.Store(false)
		return
	}
	if s.cfg.grace > 0 {
		s.pin(entries)
	}
	go func() {
		s.reconcile(entries, dropped)
		time.AfterFunc(s.grace(), func() {
			s.unpin()
			rest, dropped := s.journal.take()
			s.reconcile(rest, dropped)
			s.journal.running.Store(false)
		})
	}()
}

// reconcile charges entries to the primary, oldest first, one script call
// per entry. It stops at the first store failure, or when the breaker
// leaves the closed state, and puts what is left back.
func (s *Store) reconcile(entries []*jentry, dropped int64) {
	if len(entries) == 0 && dropped == 0 {
		return
	}
	var keys, units, failed int64
	for i, e := range entries {
		if toState(s.cb.State()) != StateClosed {
			s.journal.putBack(entries[i:])
			s.logReconcile(keys, units, failed, dropped, ErrOpen)
			return
		}
		n, err := s.charge(e)
		switch ratewarden.Classify(context.Background(), err) {
		case ratewarden.NoError:
			keys, units = keys+1, units+n
		case ratewarden.StoreUnavailable:
			if !errors.Is(err, ratewarden.ErrInvalidConfig) {
				s.journal.putBack(entries[i:])
				s.logReconcile(keys, units, failed, dropped, err)
				return
			}
			fallthrough
		default: // the key's bad state, or a primary that takes no charges
			failed += n
		}
	}
	s.logReconcile(keys, units, failed, dropped, nil)
}

// charge writes e back in one call and returns its units.
func (s *Store) charge(e *jentry) (int64, error) {
	now := s.since(time.Now())
	spent := make([]ratewarden.Spent, 0, len(e.spans))
	var n int64
	for _, sp := range e.spans {
		spent = append(spent, ratewarden.Spent{Units: sp.units, Ago: time.Duration(now - sp.at)})
		n += sp.units
	}
	ctx, cancel := context.WithTimeout(context.Background(), reconcileTimeout)
	defer cancel()
	return n, s.charger.Charge(ctx, e.key, e.limits, spent, nil)
}

func (s *Store) logReconcile(keys, units, failed, dropped int64, err error) {
	s.reconciled.Add(units)
	attrs := []slog.Attr{
		slog.String("store", s.cfg.name),
		slog.Int64("keys", keys),
		slog.Int64("units", units),
		slog.Int64("units_refused", failed),
		slog.Int64("units_not_journaled", dropped),
	}
	msg, level := "fallback: wrote the outage's local_fallback admissions back to the primary store", slog.LevelInfo
	if err != nil {
		msg, level = "fallback: writing the outage's local_fallback admissions back stopped; the rest waits for the next recovery", slog.LevelWarn
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	s.cfg.logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// Reconciled returns how many units admitted by LocalFallback during
// outages have been written back to the primary store so far.
func (s *Store) Reconciled() int64 { return s.reconciled.Load() }
