package redisstore

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// BenchmarkBeyond measures reservations, charges and permits beside plain
// checks in the same run, from 16 goroutines per CPU over 1024 keys:
//
//   - check, check_unbatched: Store.Check admitting on a token bucket,
//     batched (the default) and not: the baselines.
//   - reserve_ahead: Store.Check with MaxDelay on a bucket of 1/s, so
//     nearly every check is a reservation ahead of time (batched, like
//     any check).
//   - charge: Store.Charge of one unit (the charge script; never batched).
//   - acquire_release: Store.Acquire then Store.Release, two permit
//     script calls per op (never batched).
func BenchmarkBeyond(b *testing.B) {
	srv := testredis.Start(b)
	fast := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1_000_000, Period: time.Second}
	slow := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "bench:beyond:" + strconv.Itoa(i)
	}
	var holders atomic.Uint64
	for _, tc := range []struct {
		name string
		opts []Option
		op   func(s *Store, key string, res []ratewarden.Result) error
	}{
		{"check", nil, func(s *Store, key string, res []ratewarden.Result) error {
			return s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{fast}, Cost: 1}, res)
		}},
		{"check_unbatched", []Option{WithBatching(false)}, func(s *Store, key string, res []ratewarden.Result) error {
			return s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{fast}, Cost: 1}, res)
		}},
		{"reserve_ahead", nil, func(s *Store, key string, res []ratewarden.Result) error {
			return s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{slow}, Cost: 1, MaxDelay: ratewarden.MaxPeriod}, res)
		}},
		{"charge", nil, func(s *Store, key string, _ []ratewarden.Result) error {
			return s.Charge(bg, key, []ratewarden.Limit{fast}, []ratewarden.Spent{{Units: 1}}, nil)
		}},
		{"acquire_release", nil, func(s *Store, key string, _ []ratewarden.Result) error {
			h := strconv.FormatUint(holders.Add(1), 36)
			if p, err := s.Acquire(bg, key, h, ratewarden.MaxPermits, time.Minute); err != nil || !p.Acquired {
				return fmt.Errorf("acquire: %+v, %w", p, err)
			}
			_, err := s.Release(bg, key, h)
			return err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := openStore(b, srv.Addr, tc.opts...)
			var next atomic.Uint64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]ratewarden.Result, 1)
				i := next.Add(1) * 7919
				for pb.Next() {
					i++
					if err := tc.op(s, keys[i%uint64(len(keys))], res); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
