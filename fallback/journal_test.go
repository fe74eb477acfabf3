package fallback

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

const ms = int64(time.Millisecond)

func charge(at, units int64) span { return span{lo: at, hi: at, units: units} }
func refund(at, units int64) span { return span{lo: at, hi: at, units: -units} }

func pushAll(e *jentry, spans ...span) {
	for _, sp := range spans {
		e.push(sp)
	}
}

// Charges merge within the grain, dated at their latest; a refund comes
// off the charge span that covers its instant, else is a span of its own,
// merged with neighbouring refunds at their earliest; a refund and a
// charge never merge.
func TestJournalPush(t *testing.T) {
	e := &jentry{grain: 10 * ms}
	pushAll(e,
		charge(0, 1), charge(4*ms, 2), charge(9*ms, 3), // one span, dated 9ms
		charge(10*ms, 4),                     // 10ms after the first: a new span
		refund(4*ms, 2),                      // a reservation of the first span settled: off it
		refund(-50*ms, 5), refund(-45*ms, 1), // before the journal: one refund span, dated -50ms
		charge(16*ms, 2),  // after a refund: a new span
		refund(-45*ms, 1), // after a charge: a new span
	)
	want := []span{
		{lo: 0, hi: 9 * ms, units: 4},
		{lo: 10 * ms, hi: 10 * ms, units: 4},
		{lo: -50 * ms, hi: -45 * ms, units: -6},
		{lo: 16 * ms, hi: 16 * ms, units: 2},
		{lo: -45 * ms, hi: -45 * ms, units: -1},
	}
	if !slices.Equal(e.spans, want) {
		t.Fatalf("spans =\n%+v\nwant\n%+v", e.spans, want)
	}
	var at []int64
	for _, sp := range e.spans {
		at = append(at, sp.at())
	}
	if want := []int64{9 * ms, 10 * ms, -50 * ms, 16 * ms, -45 * ms}; !slices.Equal(at, want) {
		t.Errorf("dated at %v, want %v", at, want)
	}

	// A refund larger than the span it settles takes it away; the rest is a
	// refund of its own.
	pushAll(e, refund(16*ms, 5))
	want = append(want[:3], span{lo: -45 * ms, hi: -45 * ms, units: -1}, span{lo: 16 * ms, hi: 16 * ms, units: -3})
	if !slices.Equal(e.spans, want) {
		t.Fatalf("after a refund of 5 off a span of 2:\n%+v\nwant\n%+v", e.spans, want)
	}
	// Reservations given back are not journaled.
	if got := spansOf([]ratewarden.Spent{{Units: 1, Ago: time.Second}, {Units: -1, Ago: -time.Second}, {Units: -2}}, 0); !slices.Equal(got, []span{charge(-int64(time.Second), 1), refund(0, 2)}) {
		t.Errorf("spansOf = %+v", got)
	}
}

// A full entry compacts by merging the narrowest pair of neighbours of
// one sign, or, when signs alternate, the second refund into the first.
func TestJournalCompact(t *testing.T) {
	t.Run("neighbours", func(t *testing.T) {
		e := &jentry{grain: ms}
		for i := range int64(maxSpans) {
			e.spans = append(e.spans, charge(i*20*ms, 1))
		}
		e.spans[21] = charge(415*ms, 1) // 20 and 21 are 15ms apart, the others 20ms+
		e.push(charge(time.Second.Nanoseconds(), 1))
		if len(e.spans) != maxSpans || e.spans[20] != (span{lo: 400 * ms, hi: 415 * ms, units: 2}) || e.spans[maxSpans-1] != charge(time.Second.Nanoseconds(), 1) {
			t.Fatalf("after compaction: %d spans, [20] = %+v, last %+v", len(e.spans), e.spans[20], e.spans[maxSpans-1])
		}
	})
	t.Run("alternating", func(t *testing.T) {
		e := &jentry{grain: ms}
		for i := range int64(maxSpans) {
			if i%2 == 0 {
				e.spans = append(e.spans, charge(i*10*ms, 1))
			} else {
				e.spans = append(e.spans, refund(-i*10*ms, 1)) // settling reservations before the outage
			}
		}
		e.push(charge(time.Second.Nanoseconds(), 1))
		want := []span{charge(0, 1), {lo: -30 * ms, hi: -10 * ms, units: -2}, charge(20*ms, 1), charge(40*ms, 1), refund(-50*ms, 1)}
		if len(e.spans) != maxSpans || !slices.Equal(e.spans[:5], want) {
			t.Fatalf("after compaction: %d spans, %+v, want %+v", len(e.spans), e.spans[:5], want)
		}
	})
}

// A journal of one key holds what it can; what it has no room for is
// counted.
func TestJournalFull(t *testing.T) {
	var j journal
	j.init(1)
	lims := []ratewarden.Limit{perHour1000}
	j.add("k", lims, charge(0, 3))
	j.add("other", lims, charge(0, 5), refund(-ms, 2))
	entries, dropped, back := j.take()
	if len(entries) != 1 || entries[0].key != "k" || dropped != 5 || back != -2 {
		t.Errorf("take = %d entries, %d, %d; want k's, 5 charged and 2 given back not journaled", len(entries), dropped, back)
	}
}

// A write-back that could not finish goes back ahead of what was
// journaled since, and merges with it by the same rules.
func TestJournalPutBack(t *testing.T) {
	var j journal
	j.init(10)
	lims := []ratewarden.Limit{perHour1000}
	j.add("k", lims, charge(0, 5), refund(-time.Minute.Nanoseconds(), 1))
	old, _, _ := j.take()
	j.add("k", lims, refund(-time.Minute.Nanoseconds(), 2), refund(0, 3), charge(2*ms, 3))
	j.putBack(old)
	entries, _, _ := j.take()
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
	want := []span{charge(0, 2), refund(-time.Minute.Nanoseconds(), 3), charge(2*ms, 3)}
	if !slices.Equal(entries[0].spans, want) {
		t.Errorf("spans %+v, want %+v", entries[0].spans, want)
	}
}

func TestJournalSpent(t *testing.T) {
	now := 10 * int64(time.Hour)
	e := &jentry{spans: []span{
		charge(now-time.Minute.Nanoseconds(), 3),
		charge(now+50*ms, 1),                         // a reservation not yet reached: charged now
		refund(now-2*time.Minute.Nanoseconds(), 2),   // dated where it was counted
		charge(now-int64(ratewarden.MaxPeriod)-1, 7), // past any limit's horizon
		refund(now-int64(ratewarden.MaxPeriod)-1, 7), // likewise
		{lo: now - 5*ms, hi: now - 2*ms, units: 4},   // a charge at its latest
		{lo: now - 5*ms, hi: now - 2*ms, units: -4},  // a refund at its earliest
	}}
	spent, charged, back := e.spent(now)
	want := []ratewarden.Spent{
		{Units: 3, Ago: time.Minute},
		{Units: 1, Ago: 0},
		{Units: -2, Ago: 2 * time.Minute},
		{Units: 4, Ago: 2 * time.Millisecond},
		{Units: -4, Ago: 5 * time.Millisecond},
	}
	if !slices.Equal(spent, want) || charged != 8 || back != -6 {
		t.Errorf("spent = %+v (%d, %d), want %+v (8, -6)", spent, charged, back, want)
	}
	if err := ratewarden.ValidateCharge("k", []ratewarden.Limit{perHour1000}, spent); err != nil {
		t.Errorf("the write-back's charge is invalid: %v", err)
	}
}

// TestJournalStricter plays random outages on a frozen clock: local
// admissions, and settlements of them and of reservations the primary
// admitted before, each refund giving back part of one reservation, dated
// at its admission, as Reservation.Settle does. It writes them back to a
// memstore twice: one call per operation at its own instant (what
// happened), and the journal's spans. The journal's copy must leave every
// limit at least as used: merging, netting, compaction and dating only
// ever err on the strict side.
func TestJournalStricter(t *testing.T) {
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 500, Period: time.Second},
		{Algorithm: ratewarden.SlidingWindow, Rate: 500, Period: time.Second},
		{Algorithm: ratewarden.SlidingLog, Rate: 500, Period: time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 500, Period: time.Second},
	}
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := memstore.New(memstore.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rounds := 4000
	if testing.Short() {
		rounds = 400
	}
	rng := rand.New(rand.NewPCG(7, 17))
	stricter := 0
	for round := range rounds {
		clock = clock.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		now := clock.UnixNano()
		lim := limits[round%len(limits)]
		lims := []ratewarden.Limit{lim}
		exact, kept := "exact:"+strconv.Itoa(round), "kept:"+strconv.Itoa(round)

		type reservation struct{ at, left int64 }
		var open []reservation
		// The primary's reservations before the outage, in both copies.
		at := now - 2*int64(time.Second)
		for range rng.IntN(6) {
			at += rng.Int64N(int64(100 * time.Millisecond))
			u := 1 + rng.Int64N(20)
			pre := []ratewarden.Spent{{Units: u, Ago: time.Duration(now - at)}}
			for _, key := range []string{exact, kept} {
				if err := m.Charge(bg, key, lims, pre, nil); err != nil {
					t.Fatal(err)
				}
			}
			open = append(open, reservation{at, u})
		}
		// The outage: local admissions, and settlements of open reservations.
		var ops []span
		for range 1 + rng.IntN(4*maxSpans) {
			at = min(at+rng.Int64N(int64(30*time.Millisecond)), now)
			if len(open) == 0 || rng.IntN(2) == 0 {
				u := 1 + rng.Int64N(20)
				ops = append(ops, charge(at, u))
				open = append(open, reservation{at, u})
				continue
			}
			i := rng.IntN(len(open))
			r := 1 + rng.Int64N(open[i].left)
			ops = append(ops, refund(open[i].at, r))
			if open[i].left -= r; open[i].left == 0 {
				open = slices.Delete(open, i, i+1)
			}
		}
		e := &jentry{grain: spanOf(lims)}
		pushAll(e, ops...)
		if len(e.spans) > maxSpans {
			t.Fatalf("round %d: %d spans kept", round, len(e.spans))
		}
		for _, op := range ops { // what happened
			if err := m.Charge(bg, exact, lims, []ratewarden.Spent{{Units: op.units, Ago: time.Duration(now - op.lo)}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if spent, _, _ := e.spent(now); len(spent) > 0 {
			if err := m.Charge(bg, kept, lims, spent, nil); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		usedExact, usedKept := used(t, m, exact, lim), used(t, m, kept, lim)
		if usedKept < usedExact {
			t.Fatalf("round %d %v: written back as it happened: %d used; as journaled: %d\nops  %+v\nkept %+v", round, lim, usedExact, usedKept, ops, e.spans)
		}
		if usedKept > usedExact {
			stricter++
		}
	}
	t.Logf("%d of %d rounds stricter than exact, none laxer", stricter, rounds)
}
