package denycache

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// TestSameDecisionsAsStore runs random sequences of checks, peeks, costs
// (0 too), multi-limit checks, resets and clock moves through a memstore and
// through a deny cache over a second memstore on the same (synctest) clock. Every step
// must get the same verdict; a cached denial must not wait longer than the
// store says.
func TestSameDecisionsAsStore(t *testing.T) {
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: ratewarden.SlidingWindow, Rate: 7, Period: 2 * time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Second, Burst: 6},
		{Algorithm: ratewarden.SlidingLog, Rate: 4, Period: 1500 * time.Millisecond},
		// Same scope as limits[0], another rate: shares its counter.
		{Algorithm: ratewarden.FixedWindow, Rate: 8, Period: time.Second},
	}
	keys := []string{"a", "b", "c"}
	steps, seeds := 4000, 20
	if testing.Short() {
		seeds = 4
	}
	for seed := range uint64(seeds) {
		synctest.Test(t, func(t *testing.T) { sameDecisions(t, seed, steps, limits, keys) })
	}
}

// sameDecisions runs one seed's sequence, in a synctest bubble: time.Sleep
// moves the clock of both memstores and the cache.
func sameDecisions(t *testing.T, seed uint64, steps int, limits []ratewarden.Limit, keys []string) {
	rng := rand.New(rand.NewPCG(seed, 99))
	time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
	ref, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	inner, s := newMem(t, WithMaxEntries(1+rng.IntN(8)))
	cached := 0
	for step := range steps {
		switch x := rng.IntN(100); {
		case x < 25:
			var d time.Duration
			switch rng.IntN(3) {
			case 0:
				d = time.Duration(rng.Int64N(2000)) // ns
			case 1:
				d = time.Duration(rng.Int64N(5000)) * time.Microsecond
			default:
				d = time.Duration(rng.Int64N(400)) * time.Millisecond
			}
			time.Sleep(d)
			continue
		case x < 27:
			key, lim := keys[rng.IntN(len(keys))], limits[rng.IntN(4)]
			if err := ref.Reset(bg, key, lim); err != nil {
				t.Fatal(err)
			}
			if err := s.Reset(bg, key, lim); err != nil {
				t.Fatal(err)
			}
			continue
		}
		key := keys[rng.IntN(len(keys))]
		var ls []ratewarden.Limit
		if rng.IntN(4) == 0 { // two limits of different scopes
			i := rng.IntN(4)
			j := (i + 1 + rng.IntN(3)) % 4
			ls = []ratewarden.Limit{limits[i], limits[j]}
		} else {
			ls = []ratewarden.Limit{limits[rng.IntN(len(limits))]}
		}
		capacity := ls[0].Capacity()
		for _, l := range ls {
			capacity = min(capacity, l.Capacity())
		}
		cost := rng.Int64N(capacity + 1)
		if rng.IntN(3) > 0 {
			cost = min(1, capacity)
		}
		peek := rng.IntN(8) == 0
		want := check(t, ref, key, cost, peek, ls...)
		got := check(t, s, key, cost, peek, ls...)
		wantAll, gotAll := true, true
		for i := range ls {
			wantAll = wantAll && want[i].Allowed
			gotAll = gotAll && got[i].Allowed
		}
		if wantAll != gotAll {
			t.Fatalf("seed %d step %d: %s cost %d peek %v %v: store %+v, cache %+v", seed, step, key, cost, peek, ls, want, got)
		}
		for i := range ls {
			if got[i].Source == ratewarden.SourceCache {
				if !got[i].Allowed {
					cached++
					if got[i].RetryAfter > want[i].RetryAfter || want[i].Allowed {
						t.Fatalf("seed %d step %d: cached %+v, store %+v", seed, step, got[i], want[i])
					}
				}
				continue
			}
			if got[i] != want[i] {
				t.Fatalf("seed %d step %d: limit %d: store %+v, through the cache %+v", seed, step, i, want[i], got[i])
			}
		}
	}
	if cached == 0 || inner.checks.Load() >= int64(steps) {
		t.Fatalf("seed %d: %d cached denials, %d inner checks: the cache never answered", seed, cached, inner.checks.Load())
	}
}
