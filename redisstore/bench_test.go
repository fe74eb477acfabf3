package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// BenchmarkCheck measures Limiter.Allow on the Store against a local
// redis-server, per algorithm, from 16 goroutines per CPU over 1024 keys
// (concurrent callers are what auto-pipelining batches).
// Limits are high enough that most checks are admitted (the writing path).
func BenchmarkCheck(b *testing.B) {
	srv := testredis.Start(b)
	for _, tc := range []struct {
		name  string
		lim   ratewarden.Limit
		store func(testing.TB, string, ...Option) *Store
	}{
		{"sliding_window", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}, openStore},
		{"fixed_window", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: ratewarden.MaxRate, Period: time.Second}, openStore},
		{"token_bucket", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1_000_000, Period: time.Second}, openStore},
		{"sliding_log", ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: ratewarden.MaxLogRate, Period: time.Second}, openStore},
		{"sliding_window_unbatched", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}, func(tb testing.TB, addr string, _ ...Option) *Store { return openStore(tb, addr, WithBatching(false)) }},
		{"sliding_window_lanes1", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}, func(tb testing.TB, addr string, _ ...Option) *Store { return openStore(tb, addr, WithBatchLanes(1)) }},
		{"sliding_window_lanes4", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}, func(tb testing.TB, addr string, _ ...Option) *Store { return openStore(tb, addr, WithBatchLanes(4)) }},
		{"sliding_window_go_redis", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}, func(tb testing.TB, addr string, _ ...Option) *Store { return openGoRedisStore(tb, addr) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := limiter(b, tc.store(b, srv.Addr))
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "bench:" + strconv.Itoa(i)
			}
			var next atomic.Uint64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1) * 7919
				for pb.Next() {
					i++
					if _, err := l.Allow(bg, keys[i%uint64(len(keys))], tc.lim); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkReplicaAck measures what WithReplicaAck(1, ...) costs: the same
// parallel checks on a primary with one replica, without and with WAIT.
func BenchmarkReplicaAck(b *testing.B) {
	primary := testredis.Start(b)
	testredis.Start(b, "--replicaof", "127.0.0.1", primary.Addr[strings.LastIndex(primary.Addr, ":")+1:])
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"no_ack", nil},
		{"ack_1", []Option{WithReplicaAck(1, time.Second)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := limiter(b, openStore(b, primary.Addr, tc.opts...))
			lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}
			testredis.WaitFor(b, 30*time.Second, func() string { // the replica acknowledging
				if _, err := l.Allow(bg, "warm", lim); err != nil {
					return err.Error()
				}
				return ""
			})
			var next atomic.Uint64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1) * 7919
				for pb.Next() {
					i++
					if _, err := l.Allow(bg, "bench:"+strconv.FormatUint(i%1024, 10), lim); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCheckOneCaller measures Limiter.Allow from one caller at a time
// (sequential checks, the latency a lone request sees) on 100,000 keys,
// once the Store is calm, with a caller context without a deadline
// (the Store's timeout applies) and with a cancelable one.
func BenchmarkCheckOneCaller(b *testing.B) {
	srv := testredis.Start(b)
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "one:" + strconv.Itoa(i)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Hour}
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"batched", nil},
		{"unbatched", []Option{WithBatching(false)}},
	} {
		s := openStore(b, srv.Addr, tc.opts...)
		l := limiter(b, s)
		for i := range 2 * calmAfter {
			if _, err := l.Allow(bg, "warm:"+strconv.Itoa(i), lim); err != nil {
				b.Fatal(err)
			}
		}
		cancelable, cancel := context.WithCancel(bg)
		b.Cleanup(cancel)
		for ctxName, ctx := range map[string]context.Context{"background": bg, "cancelable": cancelable} {
			b.Run(tc.name+"/"+ctxName, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := l.Allow(ctx, keys[i%len(keys)], lim); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
