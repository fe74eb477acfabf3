package fallback

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
)

// The write-back journal. While the primary is out, every replica admits
// its share of a limit locally, and costs settled meanwhile (Charge: a
// reservation's refund or extra charge) cannot reach it; when it is back,
// the replica writes all of it into the shared state (ratewarden.Store.Charge),
// in the order it happened, so that a window open across the outage
// counts both.
//
// Units are journaled per key and limits as spans: signed unit counts,
// each dated where the write-back applies it, always erring on the strict
// side, so that a write-back never frees capacity that was not freed:
//
//   - charges (admissions, extra charges) merge while they cover at most
//     spanOf(limits) together, dated at the latest: a unit is never dated
//     earlier than it was admitted, which could let it drop out of its
//     window too soon;
//   - a refund (Units < 0) is dated at the instant of the reservation it
//     settles. When a charge span covers that instant, the refund is
//     taken off it: the reservation was admitted there, and only the
//     span's dating, at its latest, differs from what happened. Otherwise
//     it is a span of its own, merged with a neighbouring refund within
//     the span length, dated at the earliest. A refund is never merged
//     into a later charge: written back before a charge it came after, it
//     could take that charge away, as a count stops at zero.
//
// A reservation given back (a refund dated ahead, Spent.Ago < 0: a
// canceled Limiter.Wait) is not journaled: the instant it names is the TAT
// of the store that made the reservation, which the primary's state after
// the write-back's own charges no longer matches. It stays spent in the
// primary, as it does when a later reservation was made on top of it.
//
// When an entry holds maxSpans spans, compact makes room by a change that
// can only make the write-back stricter.

// DefaultReconcileKeys is how many keys' LocalFallback admissions a Store
// keeps to write back, at most (WithReconcileKeys).
const DefaultReconcileKeys = 10_000

// maxSpans bounds one entry's spans.
const maxSpans = 32

// span is units of one sign, dated between lo and hi on the Store's
// clock.
type span struct {
	lo, hi int64
	units  int64 // > 0 charged, < 0 given back; never 0
}

// charged reports whether sp is a charge.
func (sp span) charged() bool { return sp.units > 0 }

// at is the instant the write-back dates sp at: a charge's latest, a
// refund's earliest.
func (sp span) at() int64 {
	if sp.charged() {
		return sp.hi
	}
	return sp.lo
}

// merge adds o, of the same sign, to sp.
func (sp *span) merge(o span) {
	sp.lo, sp.hi, sp.units = min(sp.lo, o.lo), max(sp.hi, o.hi), sp.units+o.units
}

type jentry struct {
	key    string
	limits []ratewarden.Limit // the limits, not the local shares
	spans  []span             // in the order they happened
	grain  int64              // spanOf(limits)
}

type journal struct {
	mu          sync.Mutex
	max         int
	entries     map[string]*jentry // by key and limits
	order       []*jentry          // oldest first
	dropped     int64              // units charged that were not journaled
	droppedBack int64              // units given back that were not journaled (<= 0)
}

func (j *journal) init(maxKeys int) {
	j.max = maxKeys
	j.entries = make(map[string]*jentry)
}

// on reports whether the journal keeps anything: WithReconcileKeys is not
// 0.
func (j *journal) on() bool { return j.max > 0 }

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

// spansOf turns a Charge's spent, made at now (the Store's clock), into
// spans, leaving out reservations given back (see above).
func spansOf(spent []ratewarden.Spent, now int64) []span {
	out := make([]span, 0, len(spent))
	for _, sp := range spent {
		if sp.Ago < 0 {
			continue
		}
		at := now - int64(sp.Ago)
		out = append(out, span{lo: at, hi: at, units: sp.Units})
	}
	return out
}

// add journals spans, in order, under key and limits, which it keeps (the
// caller must not change them).
func (j *journal) add(key string, limits []ratewarden.Limit, spans ...span) {
	if len(spans) == 0 {
		return
	}
	jk := journalKey(key, limits)
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.entries[jk]
	if e == nil {
		if len(j.entries) >= j.max {
			j.drop(spans)
			return
		}
		e = &jentry{key: strings.Clone(key), limits: limits, grain: spanOf(limits)}
		j.entries[jk] = e
		j.order = append(j.order, e)
	}
	for _, sp := range spans {
		e.push(sp)
	}
}

// count adds units charged and given back that were not journaled to
// the next take's counts.
func (j *journal) count(dropped, back int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropped, j.droppedBack = j.dropped+dropped, j.droppedBack+back
}

// drop counts spans the journal has no room for. j.mu is held.
func (j *journal) drop(spans []span) {
	for _, sp := range spans {
		if sp.charged() {
			j.dropped += sp.units
		} else {
			j.droppedBack += sp.units
		}
	}
}

// push adds sp to e's spans by the rules above.
func (e *jentry) push(sp span) {
	if !sp.charged() {
		if sp = e.net(sp); sp.units == 0 {
			return
		}
	}
	if n := len(e.spans); n > 0 {
		last := &e.spans[n-1]
		if last.charged() == sp.charged() && max(last.hi, sp.hi)-min(last.lo, sp.lo) < e.grain {
			last.merge(sp)
			return
		}
	}
	if len(e.spans) >= maxSpans {
		e.compact()
	}
	e.spans = append(e.spans, sp)
}

// net takes the refund r off the latest charge span that covers its
// instant, as far as that span's units go, and returns what is left of r
// (Units 0: nothing). A span taken to zero is removed.
func (e *jentry) net(r span) span {
	for i := len(e.spans) - 1; i >= 0; i-- {
		c := &e.spans[i]
		if !c.charged() || r.lo < c.lo || r.lo > c.hi {
			continue
		}
		if c.units > -r.units {
			c.units += r.units
			r.units = 0
			return r
		}
		r.units += c.units
		e.spans = slices.Delete(e.spans, i, i+1)
		return r
	}
	return r
}

// compact frees one place in e.spans by the first of these that applies.
// Each can only leave the shared state stricter than writing every span
// back as it is would, given that a refund gives back units counted
// before it: a charge applied later, or dated later, counts at least as
// much; a refund applied earlier, or dated earlier, gives back at most as
// much.
//
//  1. Merge the two neighbouring spans of one sign that cover the least
//     time together: charges dated at the later, refunds at the earlier
//     instant.
//  2. Merge the second refund span into the first: it moves earlier.
//
// With maxSpans >= 4 one of them applies: spans with no neighbour of their
// sign alternate, so at least two are refunds.
func (e *jentry) compact() {
	best, width := -1, int64(0)
	for i := 0; i+1 < len(e.spans); i++ {
		a, b := e.spans[i], e.spans[i+1]
		if a.charged() != b.charged() {
			continue
		}
		if w := max(a.hi, b.hi) - min(a.lo, b.lo); best < 0 || w < width {
			best, width = i, w
		}
	}
	if best >= 0 {
		e.spans[best].merge(e.spans[best+1])
		e.spans = slices.Delete(e.spans, best+1, best+2)
		return
	}
	i := -1
	for j, sp := range e.spans {
		switch {
		case sp.charged():
		case i < 0:
			i = j
		default:
			e.spans[i].merge(sp)
			e.spans = slices.Delete(e.spans, j, j+1)
			return
		}
	}
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
// units charged and given back that it had no room for since the last
// take.
func (j *journal) take() ([]*jentry, int64, int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out, dropped, back := j.order, j.dropped, j.droppedBack
	j.order, j.dropped, j.droppedBack = nil, 0, 0
	clear(j.entries)
	return out, dropped, back
}

// putBack returns entries a write-back could not finish to the journal,
// ahead of what was journaled since (they are older), merging with entries
// of the same key and limits by the same rules.
func (j *journal) putBack(entries []*jentry) {
	// Entries of one key and limits (from batches taken one after the
	// other), oldest first, become one.
	byKey := make(map[string]*jentry, len(entries))
	var older []*jentry
	for _, e := range entries {
		jk := journalKey(e.key, e.limits)
		if first := byKey[jk]; first != nil {
			for _, sp := range e.spans {
				first.push(sp)
			}
			continue
		}
		byKey[jk] = e
		older = append(older, e)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var kept []*jentry
	for _, e := range older {
		jk := journalKey(e.key, e.limits)
		if cur := j.entries[jk]; cur != nil {
			newer := cur.spans
			cur.spans = e.spans
			for _, sp := range newer {
				cur.push(sp)
			}
			continue
		}
		if len(j.entries) >= j.max {
			j.drop(e.spans)
			continue
		}
		j.entries[jk] = e
		kept = append(kept, e)
	}
	j.order = append(kept, j.order...)
}

// spent is e's spans as a Charge at now (the Store's clock) takes them,
// with the units charged and given back. A span dated after now (a
// reservation admitted ahead) is charged at now, and one dated more than
// ratewarden.MaxPeriod ago, whose effect has ended for any limit, is left
// out.
func (e *jentry) spent(now int64) (spent []ratewarden.Spent, charged, back int64) {
	spent = make([]ratewarden.Spent, 0, len(e.spans))
	for _, sp := range e.spans {
		ago := now - sp.at()
		if ago > int64(ratewarden.MaxPeriod) {
			continue
		}
		spent = append(spent, ratewarden.Spent{Units: sp.units, Ago: time.Duration(max(ago, 0))})
		if sp.charged() {
			charged += sp.units
		} else {
			back += sp.units
		}
	}
	return spent, charged, back
}
