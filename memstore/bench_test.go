package memstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// BenchmarkAllow measures Limiter.Allow on a memstore with the real clock,
// from all Ps at once: on one hot key (one shard's lock) and spread over
// 65,536 keys.
func BenchmarkAllow(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, alg := range []ratewarden.Algorithm{ratewarden.SlidingWindow, ratewarden.FixedWindow, ratewarden.TokenBucket, ratewarden.SlidingLog} {
		for _, many := range []bool{false, true} {
			// One key: 10,000/s keeps a mix of admits and denials (and the
			// SlidingLog log at its cap). Many keys: 10,000/h keeps every
			// key's state alive and admitting, so each call decides on an
			// existing key.
			name, lim := alg.String()+"/one-key", ratewarden.Limit{Algorithm: alg, Rate: 10_000, Period: time.Second}
			if many {
				name, lim.Period = alg.String()+"/many-keys", time.Hour
			}
			b.Run(name, func(b *testing.B) {
				s, err := memstore.New()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l, _ := ratewarden.New(s)
				var seq atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := seq.Add(1) * 7919
					for pb.Next() {
						k := keys[0]
						if many {
							i++
							k = keys[i&(1<<16-1)]
						}
						if _, err := l.Allow(ctx, k, lim); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
