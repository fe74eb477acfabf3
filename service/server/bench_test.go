package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

const benchConfig = `
policies:
  api: 1000000000/1h fixed_window
---
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// benchBackends runs each benchmark on the in-memory store and on Redis.
func benchBackends(b *testing.B, fn func(b *testing.B, s *server.Server)) {
	b.Run("memory", func(b *testing.B) {
		fn(b, startBench(b, "memory"))
	})
	b.Run("redis", func(b *testing.B) {
		fn(b, startBench(b, "redis"))
	})
}

func startBench(b *testing.B, kind string) *server.Server {
	var be server.Backend
	if kind == "memory" {
		m, err := newMem()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		be = m
	} else {
		rs := testredis.Start(b)
		r, err := newRedis("redis://" + rs.Addr) // deadline 1s: measure Redis, not the fallback
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		be = r
	}
	cfg, err := parse(benchConfig)
	if err != nil {
		b.Fatal(err)
	}
	s, err := server.New(be, server.WithConfig(cfg), server.WithLogger(quietLogger()))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// BenchmarkHTTPCheck: decisions per second through POST /v1/check over
// loopback, many clients at once, 1000 distinct keys.
func BenchmarkHTTPCheck(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *server.Server) {
		url := "http://" + s.HTTPAddr() + "/v1/check"
		tr := &http.Transport{MaxIdleConnsPerHost: 256}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		var n atomic.Int64
		b.SetParallelism(16) // 16 × GOMAXPROCS concurrent callers
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				body := fmt.Sprintf(`{"key":"user-%d","policy":"api"}`, n.Add(1)%1000)
				resp, err := client.Post(url, "application/json", bytes.NewBufferString(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		noDegraded(b, s)
	})
}

// BenchmarkGRPCShouldRateLimit: decisions per second through the Envoy
// rate limit service over loopback, one connection, many streams.
func BenchmarkGRPCShouldRateLimit(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *server.Server) {
		conn, err := dial(s.GRPCAddr())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		c := rlspb.NewRateLimitServiceClient(conn)
		var n atomic.Int64
		b.SetParallelism(16) // 16 × GOMAXPROCS concurrent callers
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req := &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{
					desc("user", fmt.Sprint(n.Add(1)%1000)),
				}}
				resp, err := c.ShouldRateLimit(context.Background(), req)
				if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
					b.Errorf("%v %v", resp, err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		noDegraded(b, s)
	})
}

func newMem() (*backend.Memory, error) { return backend.NewMemory(server.DefaultMaxKeyBytes) }
func newRedis(url string) (*backend.Redis, error) {
	return backend.NewRedis(url, backend.WithTimeout(time.Second))
}
func parse(y string) (*config.Config, error) { return config.Parse("bench.yaml", []byte(y)) }
func quietLogger() *slog.Logger              { return slog.New(slog.DiscardHandler) }
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// noDegraded fails b when any decision came from a failure policy: the
// figure must be the store's.
func noDegraded(b *testing.B, s *server.Server) {
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
