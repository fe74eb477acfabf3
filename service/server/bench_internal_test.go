package server

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/testredis"
	svcconfig "github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

// BenchConfig is the configuration of the benchmarks: limits so high that
// nothing is denied, so every request does the whole work.
const BenchConfig = `
policies:
  api: 1000000000/1h fixed_window
  slots: {max_in_flight: 1000000, ttl: 1h}
---
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    value: /api/*
    rate_limit: {name: api, unit: minute, requests_per_unit: 1000000000}
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// BenchLoad is a shape of ShouldRateLimit request: Request(i) is the i-th.
type BenchLoad struct {
	Name    string
	Request func(i int) *rlspb.RateLimitRequest
}

// BenchLoads are the request shapes of the gRPC benchmarks: one
// descriptor on 10,000 keys ("many descriptors"), one descriptor on one
// hot key, and three descriptors per request, as an Envoy route with a
// client address, a path and a tenant's route sends them.
var BenchLoads = []BenchLoad{
	{"keys", func(i int) *rlspb.RateLimitRequest {
		return benchRequest(benchDesc("user", "u-"+strconv.Itoa(i%10000)))
	}},
	{"hot", func(int) *rlspb.RateLimitRequest { return benchRequest(benchDesc("user", "hot")) }},
	{"three", func(i int) *rlspb.RateLimitRequest {
		return benchRequest(
			benchDesc("remote_address", "10.0."+strconv.Itoa(i%100)+"."+strconv.Itoa(i/100%100)),
			benchDesc("path", "/api/items"),
			benchDesc("tenant", "t-"+strconv.Itoa(i%100), "route", "search"))
	}},
}

func benchRequest(ds ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "bench", Descriptors: ds}
}

func benchDesc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// BenchBackend returns a backend of kind memory or redis (on a
// redis-server of its own, with a 1 s deadline so that the figures are
// Redis's, not the fallback's), closed when b ends.
func BenchBackend(b *testing.B, kind string) decide.Backend {
	if kind == "memory" {
		m, err := backend.NewMemory(DefaultMaxKeyBytes)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}
	rs := testredis.Start(b)
	r, err := backend.NewRedis("redis://"+rs.Addr, backend.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// NewBenchServer is a Server on BenchConfig that is not started; more
// options may follow.
func NewBenchServer(b *testing.B, be decide.Backend, opts ...Option) *Server {
	cfg, err := svcconfig.Parse("bench.yaml", []byte(BenchConfig))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(be, append([]Option{WithConfig(cfg), WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkRLSDecide is the service's own work per ShouldRateLimit call,
// without gRPC: validation, matching, the Limiter's store calls, the
// answer with ratewarden's headers, and metrics. 64 callers at once; the
// requests are built before the clock starts. cpu-ns/op is the process's
// CPU time per call (the Redis client's included, redis-server's not).
func BenchmarkRLSDecide(b *testing.B) {
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			s := NewBenchServer(b, BenchBackend(b, kind))
			g := s.rls
			for _, load := range BenchLoads {
				b.Run(load.Name, func(b *testing.B) {
					reqs := make([]*rlspb.RateLimitRequest, 10000)
					for i := range reqs {
						reqs[i] = load.Request(i)
					}
					var next atomic.Int64
					b.SetParallelism(32)
					b.ReportAllocs()
					b.ResetTimer()
					cpu := StartCPU()
					b.RunParallel(func(pb *testing.PB) {
						ctx := context.Background()
						for pb.Next() {
							resp, err := g.ShouldRateLimit(ctx, reqs[int(next.Add(1))%len(reqs)])
							if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
								b.Errorf("%v %v", resp, err)
								return
							}
						}
					})
					cpu.Stop(b)
					NoDegraded(b, s)
				})
			}
		})
	}
}

// NoDegraded fails b when any decision came from a failure policy: the
// figures must be the store's.
func NoDegraded(b *testing.B, s *Server) {
	mfs, err := s.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ratewarden_degraded_decisions_total" && len(mf.GetMetric()) > 0 {
			b.Fatalf("degraded decisions during the benchmark: %v", mf.GetMetric())
		}
	}
}
