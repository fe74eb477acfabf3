package memstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

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

// BenchmarkVersusXRate puts memstore, through ratewarden.Limiter.Allow
// with the real clock, beside golang.org/x/time/rate's Limiter.Allow in one
// run, so that their ratio means something on a shared machine. Both keep a
// token bucket (memstore's is GCRA) of the same rate and burst. On one key,
// 10,000/s keeps a mix of admits and denials; over 65,536 keys, 10,000/h
// keeps every key admitting. x/time/rate has no keys: its many-keys case
// indexes a slice of 65,536 prebuilt limiters, the floor a keyed store
// (lookup, bounded memory, key copies) is measured against. store-check
// calls the Store's Check directly with a prebuilt Request: the store's own
// share, without the Limiter's validation and pooling. Each case runs from
// one goroutine (serial) and from all Ps at once (parallel).
func BenchmarkVersusXRate(b *testing.B) {
	const nkeys = 1 << 16
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, many := range []bool{false, true} {
		lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10_000, Period: time.Second}
		name := "one-key"
		if many {
			name, lim.Period = "many-keys", time.Hour
		}
		key := func(i uint64) string {
			if many {
				return keys[i&(nkeys-1)]
			}
			return keys[0]
		}
		every := rate.Every(lim.Period / time.Duration(lim.Rate))
		for _, par := range []bool{false, true} {
			mode := "/serial"
			if par {
				mode = "/parallel"
			}
			b.Run(name+mode+"/x-time-rate", func(b *testing.B) {
				n := 1
				if many {
					n = nkeys
				}
				ls := make([]*rate.Limiter, n)
				for i := range ls {
					ls[i] = rate.NewLimiter(every, int(lim.Rate))
				}
				run(b, par, func() func(uint64) error {
					return func(i uint64) error {
						ls[i&uint64(n-1)].Allow()
						return nil
					}
				})
			})
			b.Run(name+mode+"/memstore", func(b *testing.B) {
				s, err := memstore.New()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l, _ := ratewarden.New(s)
				run(b, par, func() func(uint64) error {
					return func(i uint64) error {
						_, err := l.Allow(ctx, key(i), lim)
						return err
					}
				})
			})
			b.Run(name+mode+"/store-check", func(b *testing.B) {
				s, err := memstore.New()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				run(b, par, func() func(uint64) error {
					req := &ratewarden.Request{Limits: []ratewarden.Limit{lim}, Cost: 1}
					res := make([]ratewarden.Result, 1)
					return func(i uint64) error {
						req.Key = key(i)
						return s.Check(ctx, req, res)
					}
				})
			})
		}
	}
}

// run calls a function from newF with a counter, from one goroutine or
// from all Ps (each with its own function from newF), each goroutine
// starting at its own place in the counter's sequence.
func run(b *testing.B, parallel bool, newF func() func(i uint64) error) {
	b.ReportAllocs()
	if !parallel {
		f := newF()
		var i uint64
		for b.Loop() {
			i++
			if err := f(i); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	var seq atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		f := newF()
		i := seq.Add(1) * 7919
		for pb.Next() {
			i++
			if err := f(i); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
