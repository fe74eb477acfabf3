package fallback

import (
	"context"
	"errors"
	"log/slog"
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
	logged   atomic.Int64 // clock.Now() of the last log line, 0 for none
}

func (k *keyStates) note(s *Store) {
	n := k.n.Add(1)
	now := s.clock.Now()
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

// recordLocal journals the admission sc decided locally for req, under the
// limits that LocalFallback answered. A reservation admitted ahead
// (Result.Delay) is dated at the instant its units are for, as the store
// would have counted it.
func (s *Store) recordLocal(req *ratewarden.Request, sc *scratch) {
	var delay time.Duration
	for _, r := range sc.res {
		if !r.Allowed {
			return
		}
		delay = max(delay, r.Delay)
	}
	limits := make([]ratewarden.Limit, len(sc.idx))
	for j, i := range sc.idx {
		limits[j] = req.Limits[i]
	}
	at := s.clock.Now() + int64(delay)
	s.journal.add(req.Key, limits, span{lo: at, hi: at, units: req.Cost})
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
	until atomic.Int64 // clock.Now() when the grace ends; 0: no key is pinned
	mu    sync.RWMutex
	keys  map[string]struct{}
}

// pinned reports whether key is under grace. Outside grace periods it
// costs one atomic load.
func (s *Store) pinned(key string) bool {
	until := s.pins.until.Load()
	if until == 0 || s.clock.Now() >= until {
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
	s.pins.until.Store(s.clock.Now() + int64(s.grace()))
}

// unpin ends the grace, unless a later recovery extended it: it reports
// whether the grace is over.
func (s *Store) unpin() bool {
	s.pins.mu.Lock()
	defer s.pins.mu.Unlock()
	if until := s.pins.until.Load(); until != 0 && s.clock.Now() < until {
		return false
	}
	s.pins.until.Store(0)
	clear(s.pins.keys)
	return true
}

// startReconcile runs when the breaker has closed again, under the
// breaker's lock (so it must not call the breaker): it takes the journal,
// pins its keys for the grace period and queues it for the writer; when
// the grace ends, it unpins them and queues what they admitted
// meanwhile. Every recovery does so, also one that comes while a
// write-back or a grace is still under way (a breaker that closed, opened
// and closed again): the keys of each stay on their local share for a
// grace after the last recovery that found them in the journal.
func (s *Store) startReconcile() {
	if !s.journal.on() {
		return
	}
	if s.writeBack(s.cfg.grace > 0) && s.cfg.grace > 0 {
		time.AfterFunc(s.grace(), s.endGrace)
	}
}

// endGrace writes back what the pinned keys admitted during the grace,
// unless a later recovery extended it (its own timer does that). The
// writer's lock spans both, so that whoever holds it sees the grace and
// the write-back that ends it as one step.
func (s *Store) endGrace() {
	w := &s.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.unpin() {
		s.writeBackLocked(false)
	}
}

// writer writes the journal back on one goroutine at a time, in the order
// it was taken, so that a key's later units never reach the primary
// before its earlier ones. Nothing of it outlives its queue.
type writer struct {
	mu    sync.Mutex
	queue []batch
	busy  bool
}

// batch is one take of the journal.
type batch struct {
	entries       []*jentry
	dropped, back int64
}

// writeBack takes the journal and queues it for the writer, starting the
// writer's goroutine unless it runs; with pin, it pins the keys taken
// first. It reports whether there was anything to write.
func (s *Store) writeBack(pin bool) bool {
	w := &s.writer
	w.mu.Lock()
	defer w.mu.Unlock()
	return s.writeBackLocked(pin)
}

// writeBackLocked is writeBack with the writer's lock held.
func (s *Store) writeBackLocked(pin bool) bool {
	w := &s.writer
	entries, dropped, back := s.journal.take()
	if len(entries) == 0 && dropped == 0 && back == 0 {
		return false
	}
	if pin {
		s.pin(entries)
	}
	w.queue = append(w.queue, batch{entries, dropped, back})
	if !w.busy {
		w.busy = true
		go s.write()
	}
	return true
}

// write writes the queued batches back, oldest first. When one cannot be
// finished (the breaker left the closed state, the primary failed), it
// and every batch queued after it go back to the journal, ahead of what
// was journaled since, for the next recovery.
func (s *Store) write() {
	w := &s.writer
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.busy = false
			w.mu.Unlock()
			return
		}
		b := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		rest := s.reconcile(b)
		if rest == nil {
			continue
		}
		w.mu.Lock()
		for _, q := range w.queue {
			rest = append(rest, q.entries...)
			s.journal.count(q.dropped, q.back)
		}
		w.queue, w.busy = nil, false
		s.journal.putBack(rest)
		w.mu.Unlock()
		return
	}
}

// tally is what one write-back did, for its log line.
type tally struct {
	keys, charged, back, failed, dropped, droppedBack int64
}

// reconcile charges b's entries to the primary, oldest first, one script
// call per entry, and logs what it did. It stops at the first store
// failure, or when the breaker leaves the closed state, and returns the
// entries it did not write; nil when it wrote them all.
func (s *Store) reconcile(b batch) []*jentry {
	t := tally{dropped: b.dropped, droppedBack: b.back}
	for i, e := range b.entries {
		if toState(s.cb.State()) != StateClosed {
			s.logReconcile(t, ErrOpen)
			return b.entries[i:]
		}
		charged, given, err := s.charge(e)
		switch ratewarden.Classify(context.Background(), err) {
		case ratewarden.NoError:
			t.keys, t.charged, t.back = t.keys+1, t.charged+charged, t.back+given
		case ratewarden.StoreUnavailable:
			if !errors.Is(err, ratewarden.ErrInvalidConfig) {
				s.logReconcile(t, err)
				return b.entries[i:]
			}
			fallthrough
		default: // the key's bad state, or a primary that takes no charges
			t.failed += charged - given
		}
	}
	s.logReconcile(t, nil)
	return nil
}

// charge writes e back in one call and returns its units charged and
// given back (<= 0).
func (s *Store) charge(e *jentry) (charged, back int64, err error) {
	spent, charged, back := e.spent(s.clock.Now())
	if len(spent) == 0 {
		return 0, 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), reconcileTimeout)
	defer cancel()
	return charged, back, s.primary.Charge(ctx, e.key, e.limits, spent, nil)
}

func (s *Store) logReconcile(t tally, err error) {
	s.reconciled.Add(t.charged)
	attrs := []slog.Attr{
		slog.String("store", s.cfg.name),
		slog.Int64("keys", t.keys),
		slog.Int64("units", t.charged),
		slog.Int64("units_given_back", -t.back),
		slog.Int64("units_refused", t.failed),
		slog.Int64("units_not_journaled", t.dropped),
		slog.Int64("units_given_back_not_journaled", -t.droppedBack),
	}
	msg, level := "fallback: wrote the outage's local_fallback admissions and settlements back to the primary store", slog.LevelInfo
	if err != nil {
		msg, level = "fallback: writing the outage's local_fallback admissions and settlements back stopped; the rest waits for the next recovery", slog.LevelWarn
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	s.cfg.logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// Reconciled returns how many units charged during outages (admitted by
// LocalFallback, or charged by Charge) have been written back to the
// primary store so far. Units given back are not counted here; the
// write-back's log line reports them.
func (s *Store) Reconciled() int64 { return s.reconciled.Load() }
