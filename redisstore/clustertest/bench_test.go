package clustertest

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

// BenchmarkClusterCheck measures Limiter.Allow on a Store over the local
// 3-primary Cluster, 16 goroutines per CPU over 1024 keys, with the check
// run as a function (the default) and with EVALSHA (WithFunctions(false),
// as on Redis 6.2). redis-cpu-us/op is the primaries' CPU time per check
// (INFO cpu), the figure functions change.
func BenchmarkClusterCheck(b *testing.B) {
	cluster := sharedCluster(b)
	prims, err := cluster.Primaries()
	if err != nil {
		b.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}
	for _, tc := range []struct {
		name string
		opts []redisstore.Option
	}{{"functions", nil}, {"evalsha", []redisstore.Option{redisstore.WithFunctions(false)}}} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := ratewarden.New(store(b, client(b, clusterURL(cluster)), tc.opts...))
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "bench:" + strconv.Itoa(i)
				if _, err := l.Allow(ctx, keys[i], lim); err != nil { // loads the script or library
					b.Fatal(err)
				}
			}
			var next atomic.Uint64
			b.SetParallelism(16)
			b.ReportAllocs()
			cpu0 := primariesCPU(b, prims)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1) * 7919
				for pb.Next() {
					i++
					if _, err := l.Allow(ctx, keys[i%uint64(len(keys))], lim); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric((primariesCPU(b, prims)-cpu0).Seconds()*1e6/float64(b.N), "redis-cpu-us/op")
		})
	}
}

// primariesCPU is the CPU time (user and system) the primaries have used.
func primariesCPU(b *testing.B, prims []*testredis.Server) time.Duration {
	b.Helper()
	var total time.Duration
	for _, p := range prims {
		cpu, err := p.CPU()
		if err != nil {
			b.Fatal(err)
		}
		total += cpu
	}
	return total
}
