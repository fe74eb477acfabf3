package fallback

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// BenchmarkCharge: a refund of one unit on a memstore directly (the
// baseline), through a fallback Store on it, and through one whose primary
// is failing with the breaker open (the local share and the journal take
// it). Keys cycle over 1024, as settlements of many clients would.
func BenchmarkCharge(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "client:" + strconv.Itoa(i)
	}
	lims := []ratewarden.Limit{perHour1000}
	run := func(b *testing.B, c ratewarden.Store) {
		spent := []ratewarden.Spent{{Units: -1, Ago: time.Millisecond}}
		applied := make([]int64, 1)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := c.Charge(bg, keys[i%len(keys)], lims, spent, applied); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("memstore", func(b *testing.B) {
		m, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		run(b, m)
	})
	b.Run("fallback", func(b *testing.B) {
		run(b, newStore(b, newFaulty(b), WithLogger(discard)))
	})
	b.Run("fallback_outage", func(b *testing.B) {
		f := newFaulty(b)
		f.set(failing)
		s := newStore(b, f, WithLogger(discard), WithTripAfter(1), WithProbeInterval(time.Hour))
		mustCheck(b, s, "trip", perHour1000, 0)
		run(b, s)
	})
}

// BenchmarkAcquireRelease: a permit taken and given back on a memstore
// directly (the baseline), through a fallback Store on it (Release looks
// in the local store first), and during an outage (the local share holds
// it).
func BenchmarkAcquireRelease(b *testing.B) {
	run := func(b *testing.B, ps ratewarden.Store) {
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			pr, err := ps.Acquire(bg, "jobs", "holder", 10, time.Minute)
			if err != nil || !pr.Acquired {
				b.Fatal(pr, err)
			}
			if ok, err := ps.Release(bg, "jobs", "holder"); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	}
	b.Run("memstore", func(b *testing.B) {
		m, err := memstore.New()
		if err != nil {
			b.Fatal(err)
		}
		run(b, m)
	})
	b.Run("fallback", func(b *testing.B) {
		run(b, newStore(b, newFaulty(b), WithLogger(discard)))
	})
	b.Run("fallback_outage", func(b *testing.B) {
		f := newFaulty(b)
		f.set(failing)
		s := newStore(b, f, WithLogger(discard), WithTripAfter(1), WithProbeInterval(time.Hour))
		mustCheck(b, s, "trip", perHour1000, 0)
		run(b, s)
	})
}
