package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"golang.org/x/time/rate"
)

// BenchmarkOneKeyInProcess compares ratewarden's in-process store with
// golang.org/x/time/rate on one key, sequentially and from all Ps at once.
// Both admit everything (a burst, or a rate, far above what a run can use),
// so both take their admitting path on every call.
func BenchmarkOneKeyInProcess(b *testing.B) {
	ctx := context.Background()
	for _, par := range []bool{false, true} {
		mode := "serial"
		if par {
			mode = "parallel"
		}
		for _, alg := range []ratewarden.Algorithm{ratewarden.TokenBucket, ratewarden.SlidingWindow} {
			b.Run("memstore_"+alg.String()+"/"+mode, func(b *testing.B) {
				s, err := memstore.New()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l, err := ratewarden.New(s)
				if err != nil {
					b.Fatal(err)
				}
				lim := ratewarden.Limit{Algorithm: alg, Rate: ratewarden.MaxRate, Period: time.Second}
				if alg == ratewarden.TokenBucket {
					// A burst no benchmark run can drain.
					lim.Rate, lim.Burst = 1_000_000, 1_000_000_000
				}
				var failed atomic.Bool
				allow := func() {
					if r, err := l.Allow(ctx, "one", lim); (err != nil || !r.Allowed) && !failed.Swap(true) {
						b.Errorf("Allow: %+v, %v", r, err)
					}
				}
				loop(b, par, allow)
			})
		}
		b.Run("x_time_rate/"+mode, func(b *testing.B) {
			l := rate.NewLimiter(rate.Limit(1e6), 1e9)
			var failed atomic.Bool
			loop(b, par, func() {
				if !l.Allow() && !failed.Swap(true) {
					b.Error("x/time/rate denied")
				}
			})
		})
	}
}

func loop(b *testing.B, par bool, f func()) {
	b.ReportAllocs()
	b.ResetTimer()
	if !par {
		for b.Loop() {
			f()
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f()
		}
	})
}
