package refmodel

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// TestSearchesAgainstLinearScan checks the model's searches where a linear
// scan is affordable: periods of a few µs and small rates, so that every
// delay up to the horizon (and beyond) can be tried. It checks that the
// admission and full-allowance predicates are monotone in the delay (the
// premise of the binary search), that RetryAfter, ResetAfter and Remaining
// equal the scans, that Allowed is the predicate at now, and that the
// horizon is a true bound.
func TestSearchesAgainstLinearScan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	denied := 0
	defer func() { t.Logf("%d denials checked", denied) }()
	for c := range 8_000 {
		p := Params{Alg: ratewarden.Algorithm(c % 4), Rate: 1 + r.Int64N(5), Period: 1 + r.Int64N(12)}
		p.Capacity = p.Rate
		if p.Alg == ratewarden.TokenBucket && r.IntN(2) == 0 {
			p.Capacity = 1 + r.Int64N(8)
		}
		m := New(p)
		now := r.Int64N(1000)
		for step := range 1 + r.IntN(20) {
			now += r.Int64N(3*p.Period + 2)
			n := r.Int64N(p.Capacity + 1)
			consume := r.IntN(4) != 0
			pre := m.clone()
			pre.seen, pre.last = true, now
			a := m.Eval(now, n, consume)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("case %d step %d: %v at now=%d n=%d consume=%v: %v; model before %v: "+format,
					append([]any{c, step, p, now, n, consume, a, pre}, args...)...)
			}
			if a.Allowed != pre.admitsAt(now, n) {
				fail("Allowed is not the predicate at now")
			}
			if !a.Allowed && !pre.horizonHolds(now, n) {
				fail("the horizon %d does not admit", pre.horizon(now))
			}
			// Remaining is the largest cost admitted now (after consuming).
			var rem int64
			for k := p.Capacity; k >= 0; k-- {
				if m.admitsAt(now, k) {
					rem = k
					break
				}
			}
			if a.Remaining != rem {
				fail("Remaining, scan gives %d", rem)
			}
			scanTo := m.horizon(now) + 3*p.Period + 3
			if !a.Allowed {
				denied++
				first := int64(-1)
				for d := int64(1); d <= scanTo; d++ {
					ok := m.admitsAt(now+d, n)
					if ok && first < 0 {
						first = d
					}
					if !ok && first >= 0 {
						fail("admission predicate not monotone: true at %d, false at %d", first, d)
					}
				}
				if a.RetryAfter != first {
					fail("RetryAfter, scan gives %d", first)
				}
			} else if a.RetryAfter != 0 {
				fail("RetryAfter of an admitted request")
			}
			first := int64(-1)
			for d := int64(0); d <= scanTo; d++ {
				ok := m.full(now + d)
				if ok && first < 0 {
					first = d
				}
				if !ok && first >= 0 {
					fail("full-allowance predicate not monotone: true at %d, false at %d", first, d)
				}
			}
			if a.ResetAfter != first {
				fail("ResetAfter, scan gives %d", first)
			}
		}
	}
}

// horizonHolds reports whether n is admitted and the allowance full at the
// horizon.
func (m *Model) horizonHolds(now, n int64) bool {
	h := m.horizon(now)
	return m.admitsAt(now+h, n) && m.full(now+h)
}

// TestClosedForms checks the model's searched answers against the closed
// forms the definitions give directly, over random limits of the whole
// valid range, and the token bucket's integer admission predicate against
// free computed as a big.Rat.
func TestClosedForms(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for c := range 20_000 {
		alg := ratewarden.Algorithm(c % 4)
		lim := RandLimit(r, alg)
		p := FromLimit(lim)
		m := New(p)
		now := RandStart(r, p, 1_700_000_000_000_000, 100_000_000_000_000)
		var last Answer
		var lastCost int64
		for step := range 1 + r.IntN(12) {
			if step > 0 {
				now += RandDelta(r, p, now, last, lastCost)
			}
			n := RandCost(r, p.Capacity, last.Remaining)
			a := m.Eval(now, n, r.IntN(4) != 0)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("case %d step %d: %v at now=%d n=%d: %v; model %v: "+format, append([]any{c, step, p, now, n, a, m}, args...)...)
			}
			P := p.Period
			ws := now - now%P
			switch alg {
			case ratewarden.FixedWindow:
				count := m.countIn(ws, ws+P)
				if !a.Allowed && a.RetryAfter != ws+P-now {
					fail("RetryAfter is not the time to the next window")
				}
				if want := map[bool]int64{true: ws + P - now, false: 0}[count > 0]; a.ResetAfter != want {
					fail("ResetAfter, want %d", want)
				}
				if a.Remaining != max(p.Rate-count, 0) {
					fail("Remaining is not Rate − count")
				}
			case ratewarden.SlidingLog:
				var lastAt int64 = -1
				for _, e := range m.adm {
					if e.t > now-P {
						lastAt = e.t
					}
				}
				want := int64(0)
				if lastAt >= 0 {
					want = lastAt + P - now
				}
				if a.ResetAfter != want {
					fail("ResetAfter, want last + P − now = %d", want)
				}
			case ratewarden.SlidingWindow:
				if est := m.estimate(now).Int64(); a.Remaining != max(p.Rate-est, 0) {
					fail("Remaining is not Rate − estimate %d", est)
				}
			case ratewarden.TokenBucket:
				if !a.Allowed {
					ratAdmits := func(t int64) bool { return ratInt(n).Cmp(m.free(t)) <= 0 }
					if !ratAdmits(now+a.RetryAfter) || (a.RetryAfter > 1 && ratAdmits(now+a.RetryAfter-1)) {
						fail("RetryAfter is not the first delay with n <= free (big.Rat)")
					}
				}
			}
			last, lastCost = a, n
		}
	}
}

// TestModelRegressions: cases that float64 arithmetic got wrong, and the
// bursts the token bucket must allow at one instant.
func TestModelRegressions(t *testing.T) {
	day := FromLimit(ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1_000_000, Period: 24 * time.Hour})
	m := New(day)
	if a := m.Eval(1_700_854_254_501_380, 650_319, true); !a.Allowed {
		t.Fatalf("first request: %v", a)
	}
	if a := m.Eval(1_700_873_387_442_163, 372_167, true); a.Allowed || a.Remaining != 372_166 {
		t.Fatalf("sliding window: %v; want rejected with 372,166 remaining (the weight rounds up to 627,834)", a)
	}

	tb := New(FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 999_983, Period: 24 * time.Hour}))
	t0 := int64(1_700_000_000_123_456)
	if a := tb.Eval(t0, 999_983, true); !a.Allowed || a.Remaining != 0 || a.ResetAfter != 86_400_000_000 {
		t.Fatalf("token bucket, full cost: %v", a)
	}
	if a := tb.Eval(t0+6_914_882_353, 80_032, true); a.Allowed || a.Remaining != 80_031 {
		t.Fatalf("token bucket: %v; want rejected with 80,031 remaining (free is 80,031.99999999999)", a)
	}

	for _, l := range []ratewarden.Limit{
		{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: time.Minute},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: time.Second, Burst: 14},
	} {
		m := New(FromLimit(l))
		for i := range l.Capacity() {
			if a := m.Eval(t0, 1, true); !a.Allowed || a.Remaining != l.Capacity()-i-1 {
				t.Fatalf("%v: request %d at one instant: %v", l, i+1, a)
			}
		}
		if a := m.Eval(t0, 1, true); a.Allowed {
			t.Fatalf("%v: request %d at one instant admitted", l, l.Capacity()+1)
		}
	}
}

// TestBoundsDetect feeds the bounds checker admissions that break each
// bound, and ones that just keep it.
func TestBoundsDetect(t *testing.T) {
	type adm struct{ t, n int64 }
	for _, c := range []struct {
		p     Params
		adms  []adm
		broke bool
	}{
		{Params{ratewarden.FixedWindow, 2, 10, 2}, []adm{{10, 1}, {19, 1}, {20, 2}}, false},
		{Params{ratewarden.FixedWindow, 2, 10, 2}, []adm{{10, 1}, {19, 2}}, true},
		{Params{ratewarden.SlidingLog, 2, 10, 2}, []adm{{5, 2}, {15, 2}}, false},
		{Params{ratewarden.SlidingLog, 2, 10, 2}, []adm{{5, 2}, {14, 1}}, true},
		{Params{ratewarden.SlidingWindow, 2, 10, 2}, []adm{{9, 2}, {11, 1}}, false},
		{Params{ratewarden.SlidingWindow, 2, 10, 2}, []adm{{9, 2}, {10, 2}}, true},
		{Params{ratewarden.SlidingWindow, 2, 10, 2}, []adm{{10, 2}, {19, 1}}, true},
		{Params{ratewarden.TokenBucket, 1, 10, 2}, []adm{{0, 2}, {10, 1}, {20, 1}}, false},
		{Params{ratewarden.TokenBucket, 1, 10, 2}, []adm{{0, 2}, {9, 1}}, true},
		{Params{ratewarden.TokenBucket, 1, 10, 2}, []adm{{0, 1}, {100, 2}, {105, 1}}, true},
	} {
		b := NewBounds(c.p)
		var err error
		for _, a := range c.adms {
			if err = b.Admit(a.t, a.n); err != nil {
				break
			}
		}
		if (err != nil) != c.broke {
			t.Errorf("%v %v: error %v, want broken=%v", c.p, c.adms, err, c.broke)
		}
	}
}

func TestMaxBurst(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 10_000 {
		l := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Period: RandPeriod(r)}
		l.Rate = RandRate(r, min(ratewarden.MaxRate, l.Period.Microseconds()))
		l.Burst = MaxBurst(l.Rate, l.Period)
		if err := l.Validate(); err != nil {
			t.Fatalf("%v: %v", l, err)
		}
		if l.Burst < ratewarden.MaxRate {
			l.Burst++
			if l.Validate() == nil {
				t.Fatalf("%v: valid, but above MaxBurst", l)
			}
		}
	}
	if got := ceilRat(big.NewRat(-3, 2)); got.Int64() != -1 {
		t.Fatalf("ceil(-3/2) = %v", got)
	}
	if got := floorRat(big.NewRat(-3, 2)); got.Int64() != -2 {
		t.Fatalf("floor(-3/2) = %v", got)
	}
}
