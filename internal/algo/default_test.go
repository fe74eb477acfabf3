package algo

import (
	"strconv"
	"testing"

	"github.com/ratewarden/ratewarden"
)

// steadyAdmitted sends cost-1 requests evenly spaced at speed × Rate per
// Period (request i at floor(i × P / (speed × Rate)) after a window
// boundary) for windows periods, and returns the units admitted in each
// epoch-aligned window. Denied requests change nothing, so after a denial
// it skips straight to the first request at or after now + RetryAfter
// (that RetryAfter is exact is TestProperties' business).
func steadyAdmitted(l ratewarden.Limit, speed int64, windows int) []int64 {
	p := FromLimit(l)
	P, n := p.Period, speed*p.Rate // n requests per period
	dq, dr := P/n, P%n             // the spacing, P/n = dq + dr/n
	counts := make([]int64, windows)
	var (
		w     Window
		b     Bucket
		lg    Log
		o     Outcome
		start = t0 - t0%P
		end   = int64(windows) * P
	)
	// Request i is at at = floor(i × P / n) after start; at and its
	// remainder r (i × P = at × n + r) advance without a division.
	i, at, r := int64(0), int64(0), int64(0)
	if p.Alg == ratewarden.SlidingWindow {
		// With no history the first window admits Rate (at least Rate
		// requests come, nothing weighs on them), and its state is just
		// that count: start from it rather than simulate it.
		w, counts[0] = Window{Start: start, Curr: p.Rate}, p.Rate
		i, at = n, P
	}
	for at < end {
		switch p.Alg {
		case ratewarden.SlidingWindow:
			w, o = SlidingWindow(w, start+at, p, 1, true)
		case ratewarden.SlidingLog:
			lg, o = SlidingLog(lg, start+at, p, 1, true)
		case ratewarden.TokenBucket:
			b, o = TokenBucket(b, start+at, p, 1, true)
		default:
			panic("steadyAdmitted: " + p.Alg.String())
		}
		if o.Allowed {
			counts[at/P]++
			i, at, r = i+1, at+dq, r+dr
			if r >= n {
				at, r = at+1, r-n
			}
			continue
		}
		// On to the first j with floor(j × P / n) >= at + RetryAfter.
		j, jr := MulDiv(at+o.RetryAfter, n, P)
		if jr > 0 {
			j++
		}
		i = max(j, i+1)
		at, r = MulDiv(i, P, n)
	}
	return counts
}

// TestDefaultKeepsRatePerPeriod: a limit that names no algorithm (a token
// bucket of burst Rate) admits exactly Rate in every window after the
// first under steady traffic at 1×, 2× and 4× the rate, and at most
// Capacity + Rate − 1 in the first (the full bucket, then the refill):
// every Rate from 1 to 1,000, then rates spaced 17 × (rate/1000) apart up
// to 10,000 (every rate to 10,000 holds too; it takes half a minute of
// CPU). SlidingWindow, by contrast, admits Rate − 1 per window
// (TestSlidingWindowLosesOneUnit).
func TestDefaultKeepsRatePerPeriod(t *testing.T) {
	step := func(rate int64) int64 { return max(1, 17*(rate/1000)) }
	for _, speed := range []int64{1, 2, 4} {
		t.Run(strconv.FormatInt(speed, 10)+"x", func(t *testing.T) {
			t.Parallel()
			checked := 0
			for rate := int64(1); rate <= 10_000; rate += step(rate) {
				l, err := ratewarden.ParseLimit(strconv.FormatInt(rate, 10) + "/1m") // no algorithm named
				if err != nil {
					t.Fatal(err)
				}
				counts := steadyAdmitted(l, speed, 3)
				if first := counts[0]; first < rate || first > l.Capacity()+rate-1 {
					t.Fatalf("%v (%v) at %d× the rate: the first window admitted %d, want %d..%d", l, l.Algorithm, speed, first, rate, l.Capacity()+rate-1)
				}
				for wi, c := range counts[1:] {
					if c != rate {
						t.Fatalf("%v (%v) at %d× the rate: window %d admitted %d, want exactly %d", l, l.Algorithm, speed, wi+1, c, rate)
					}
				}
				checked++
			}
			t.Logf("%d× the rate: %d rates checked, each window after the first exactly the rate", speed, checked)
		})
	}
}

// TestSlidingWindowLosesOneUnit documents SlidingWindow as measured: under
// steady traffic at or above the rate it admits exactly Rate − 1 per
// window (the table in docs/algorithms.md).
func TestSlidingWindowLosesOneUnit(t *testing.T) {
	for _, speed := range []int64{1, 2, 4} {
		// Rate 1: the one unit of a window blocks the whole next one.
		l := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1, Period: 60e9}
		if c := steadyAdmitted(l, speed, 6); c[2]+c[3] != 1 || c[4]+c[5] != 1 {
			t.Errorf("%v at %d×: windows admitted %v, want 1 and 0 alternating", l, speed, c)
		}
	}
	for _, rate := range []int64{2, 3, 5, 10, 20, 50, 99, 100, 1000, 10_000} {
		for _, speed := range []int64{1, 2, 4} {
			l := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: rate, Period: 60e9}
			counts := steadyAdmitted(l, speed, 5)
			for wi, c := range counts[2:] {
				if c != rate-1 {
					t.Errorf("%v at %d×: window %d admitted %d, want %d (Rate − 1)", l, speed, wi+2, c, rate-1)
				}
			}
		}
	}
}
