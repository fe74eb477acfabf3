package ratewarden

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestCommonShortcut: the shortcut Validate takes for limits of the usual
// shape accepts only limits the full check accepts too.
func TestCommonShortcut(t *testing.T) {
	rates := []int64{-1, 0, 1, 999, 1000, 1001, MaxLogRate, MaxLogRate + 1}
	periods := []time.Duration{0, time.Microsecond, 999 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond, time.Second, 24 * time.Hour, 24*time.Hour + time.Millisecond}
	bursts := []int64{-1, 0, 1, 5000}
	common := 0
	for alg := range numAlgorithms + 1 {
		for _, r := range rates {
			for _, p := range periods {
				for _, b := range bursts {
					l := Limit{Algorithm: alg, Rate: r, Period: p, Burst: b}
					if !l.common() {
						continue
					}
					common++
					if p := l.fullProblem(); p != "" {
						t.Errorf("%+v: the shortcut accepts it, the full check says %q", l, p)
					}
				}
			}
		}
	}
	if common == 0 {
		t.Fatal("no limit took the shortcut")
	}
}

// TestValidMatchesProblem: valid, the Limiter's one-expression test,
// accepts exactly the limits problem finds nothing wrong with, over every
// bound's edges and random limits.
func TestValidMatchesProblem(t *testing.T) {
	rates := []int64{-1, 0, 1, 999, 1000, 1001, MaxLogRate, MaxLogRate + 1, 1_000_000, MaxRate, MaxRate + 1}
	periods := []time.Duration{-time.Millisecond, 0, time.Microsecond, 999 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond,
		time.Second, 24 * time.Hour, 24*time.Hour + time.Millisecond, MaxPeriod - time.Millisecond, MaxPeriod, MaxPeriod + time.Millisecond}
	bursts := []int64{-1, 0, 1, 5000, 1_000_000_000, MaxRate, MaxRate + 1}
	check := func(l Limit) {
		t.Helper()
		if p := l.problem(); l.valid() != (p == "") {
			t.Errorf("%+v: valid() = %v, problem() = %q", l, l.valid(), p)
		}
	}
	for alg := range numAlgorithms + 1 {
		for _, r := range rates {
			for _, p := range periods {
				for _, b := range bursts {
					check(Limit{Algorithm: alg, Rate: r, Period: p, Burst: b})
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for range 100_000 {
		l := Limit{Algorithm: Algorithm(rng.IntN(int(numAlgorithms) + 1)), Rate: rng.Int64N(2*MaxRate) - 10,
			Period: time.Duration(rng.Int64N(int64(MaxPeriod/time.Millisecond)+10)) * time.Millisecond}
		if rng.IntN(4) == 0 {
			l.Period += time.Duration(rng.Int64N(1000)) * time.Microsecond
		}
		if rng.IntN(2) == 0 {
			l.Rate = 1 + rng.Int64N(int64(l.Period/time.Microsecond)+1)
		}
		if rng.IntN(2) == 0 {
			l.Burst = rng.Int64N(4*max(l.Rate, 1)) - 1
		}
		check(l)
	}
}
