package ratewarden

import (
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
