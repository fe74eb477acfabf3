package algo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// machine holds the state of any algorithm, so properties can be checked
// across all four with one driver.
type machine struct {
	p   Params
	win Window
	tat Bucket
	log Log
}

func (m machine) clone() machine {
	m.log = slices.Clone(m.log)
	return m
}

// eval runs the algorithm on m's state, storing the returned state.
func (m *machine) eval(now, n int64, consume bool) Outcome {
	var o Outcome
	switch m.p.Alg {
	case ratewarden.FixedWindow:
		m.win, o = FixedWindow(m.win, now, m.p, n, consume)
	case ratewarden.SlidingWindow:
		m.win, o = SlidingWindow(m.win, now, m.p, n, consume)
	case ratewarden.TokenBucket:
		m.tat, o = TokenBucket(m.tat, now, m.p, n, consume)
	case ratewarden.SlidingLog:
		m.log, o = SlidingLog(m.log, now, m.p, n, consume)
	}
	return o
}

// peek evaluates without consuming, on a copy.
func (m machine) peek(now, n int64) Outcome {
	c := m.clone()
	return c.eval(now, n, false)
}

func (m machine) equal(o machine) bool {
	return m.win == o.win && m.tat == o.tat && slices.Equal(m.log, o.log)
}

func (m machine) String() string {
	return fmt.Sprintf("%+v win=%+v tat=%+v log(len %d)=%v", m.p, m.win, m.tat, len(m.log), m.log[:min(len(m.log), 6)])
}

// randLimit draws a valid limit of alg: mostly small rates and periods (the
// interesting arithmetic), sometimes extreme ones.
func randLimit(r *rand.Rand, alg ratewarden.Algorithm) ratewarden.Limit {
	for {
		l := ratewarden.Limit{Algorithm: alg}
		switch r.IntN(4) {
		case 0:
			l.Rate = 1 + r.Int64N(10)
		case 1:
			l.Rate = 1 + r.Int64N(1000)
		case 2:
			l.Rate = 1 + r.Int64N(ratewarden.MaxLogRate)
		default:
			l.Rate = 1 + r.Int64N(ratewarden.MaxRate)
		}
		switch r.IntN(4) {
		case 0:
			l.Period = time.Duration(1+r.Int64N(2000)) * time.Millisecond
		case 1:
			l.Period = time.Duration(1+r.Int64N(7)) * []time.Duration{time.Second, time.Minute, time.Hour}[r.IntN(3)]
		case 2:
			l.Period = time.Duration(1+r.Int64N(int64(ratewarden.MaxPeriod/time.Millisecond))) * time.Millisecond
		default:
			l.Period = time.Duration(1+r.Int64N(3_600_000)) * time.Millisecond
		}
		if alg == ratewarden.TokenBucket && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(2*l.Rate)
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// randCost draws a cost in [0, c], biased to small ones and the extremes.
func randCost(r *rand.Rand, c int64) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return c
	case 2:
		return 1 + r.Int64N(c)
	default:
		return min(c, 1+r.Int64N(3))
	}
}

// randStep draws a time step relative to the limit's period.
func randStep(r *rand.Rand, p Params) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return r.Int64N(10)
	case 2:
		return r.Int64N(p.Period/max(p.Rate, 1) + 1)
	case 3:
		return r.Int64N(p.Period + 1)
	default:
		return r.Int64N(3*p.Period + 1)
	}
}

// TestProperties drives random sequences through every algorithm and checks
// after each step:
//
//   - the outcome is self-consistent (Allowed ⇔ RetryAfter == 0, Remaining
//     in [0, Capacity], Wrote ⇔ consumed, consume=false changes nothing);
//   - RetryAfter is exact: at now+RetryAfter the request is admitted, one
//     µs earlier it is not;
//   - Remaining is exact: right now Remaining units fit and one more does not;
//   - ResetAfter is exact: at now+ResetAfter the full allowance is back, one
//     µs earlier it is not;
//   - ExpireAt is safe: from ExpireAt on, the stored state evaluates exactly
//     like no state.
func TestProperties(t *testing.T) {
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for alg := range ratewarden.Algorithm(4) {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(alg)+1, 2026))
			denied, big := 0, 0
			for range iters {
				l := randLimit(r, alg)
				m := machine{p: FromLimit(l)}
				now := t0 + r.Int64N(1e15)
				steps := 1 + r.IntN(30)
				if alg == ratewarden.SlidingLog && l.Rate > 1000 {
					steps = min(steps, 5) // keep logs of 10,000 entries few
				}
				for range steps {
					now += randStep(r, m.p)
					n := randCost(r, m.p.Capacity)
					consume := r.IntN(4) != 0
					if !checkStep(t, l, m, now, n) {
						denied++
						if l.Rate > 1000 {
							big++
						}
					}
					before := m.clone()
					o := m.eval(now, n, consume)
					if !consume && !m.equal(before) {
						t.Fatalf("%v: consume=false changed the state: %v -> %v", l, before, m)
					}
					if want := consume && o.Allowed && n > 0; o.Wrote != want {
						t.Fatalf("%v at %d n=%d consume=%v: Wrote=%v, want %v", l, now, n, consume, o.Wrote, want)
					}
					if !o.Wrote && !m.equal(before) {
						t.Fatalf("%v: state changed without Wrote: %v -> %v", l, before, m)
					}
					checkExpire(t, l, m, now, o, r)
				}
			}
			// The exactness of RetryAfter must have been exercised, with
			// large rates too.
			if denied < iters/2 || big < iters/50 {
				t.Fatalf("only %d denials (%d with rate > 1000) in %d sequences", denied, big, iters)
			}
			t.Logf("%d denials checked, %d with rate > 1000", denied, big)
		})
	}
}

// checkStep checks the exactness properties of evaluating n at now on m and
// returns whether it was allowed.
func checkStep(t *testing.T, l ratewarden.Limit, m machine, now, n int64) bool {
	t.Helper()
	o := m.peek(now, n)
	if o.Remaining < 0 || o.Remaining > m.p.Capacity {
		t.Fatalf("%v %v at %d: Remaining %d out of [0, %d]", l, m, now, o.Remaining, m.p.Capacity)
	}
	if o.Allowed != (o.RetryAfter == 0) || o.RetryAfter < 0 {
		t.Fatalf("%v %v at %d n=%d: Allowed=%v RetryAfter=%d", l, m, now, n, o.Allowed, o.RetryAfter)
	}
	if o.Allowed != (n <= o.Remaining) {
		t.Fatalf("%v %v at %d n=%d: Allowed=%v with Remaining %d", l, m, now, n, o.Allowed, o.Remaining)
	}
	// Remaining fits now, one more does not.
	if !m.peek(now, o.Remaining).Allowed {
		t.Fatalf("%v %v at %d: Remaining %d does not fit", l, m, now, o.Remaining)
	}
	if o.Remaining < m.p.Capacity && m.peek(now, o.Remaining+1).Allowed {
		t.Fatalf("%v %v at %d: Remaining %d, but %d fit", l, m, now, o.Remaining, o.Remaining+1)
	}
	if !o.Allowed {
		if got := m.peek(now+o.RetryAfter, n); !got.Allowed {
			t.Errorf("BUG %v %v: at now=%d, n=%d: RetryAfter %d, but denied then (%+v)", l, m, now, n, o.RetryAfter, got)
		}
		if got := m.peek(now+o.RetryAfter-1, n); got.Allowed {
			t.Errorf("BUG %v %v: at now=%d, n=%d: RetryAfter %d, but admitted 1µs earlier (%+v)", l, m, now, n, o.RetryAfter, got)
		}
	}
	if got := m.peek(now+o.ResetAfter, 0); got.Remaining != m.p.Capacity {
		t.Errorf("BUG %v %v at %d: ResetAfter %d, but Remaining %d then", l, m, now, o.ResetAfter, got.Remaining)
	}
	if o.ResetAfter > 0 {
		if got := m.peek(now+o.ResetAfter-1, 0); got.Remaining == m.p.Capacity {
			t.Errorf("BUG %v %v at %d: ResetAfter %d, but full 1µs earlier", l, m, now, o.ResetAfter)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return o.Allowed
}

// checkExpire checks that m's state, from o.ExpireAt on (and not before
// now: an ExpireAt in the past means "already"), evaluates like no state,
// for a random cost, with and without consuming.
func checkExpire(t *testing.T, l ratewarden.Limit, m machine, now int64, o Outcome, r *rand.Rand) {
	t.Helper()
	base := max(o.ExpireAt, now)
	for _, at := range []int64{base, base + 1 + r.Int64N(m.p.Period), base + r.Int64N(5*m.p.Period)} {
		n := randCost(r, m.p.Capacity)
		for _, consume := range []bool{false, true} {
			got, empty := m.clone(), machine{p: m.p}
			og := got.eval(at, n, consume)
			oe := empty.eval(at, n, consume)
			if og != oe {
				t.Fatalf("%v %v: at ExpireAt %d %+d, n=%d consume=%v: %+v, but the empty state gives %+v", l, m, o.ExpireAt, at-o.ExpireAt, n, consume, og, oe)
			}
			if og.Wrote && !got.equal(empty) {
				t.Fatalf("%v %v: at ExpireAt%+d, n=%d: state %v, but from the empty state %v", l, m, at-o.ExpireAt, n, got, empty)
			}
		}
	}
}
