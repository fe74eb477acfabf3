package server_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/service/server"
)

// The gRPC benchmarks' callers and connections, as the side-by-side load
// test with envoyproxy/ratelimit has them (service/internal/peerdiff).
const (
	benchCallers = 64
	benchConns   = 4
)

// startBench runs a Server of kind memory or redis on BenchConfig.
func startBench(b *testing.B, kind string) *server.Server {
	s := server.NewBenchServer(b, server.BenchBackend(b, kind))
	if err := s.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// BenchmarkGRPCShouldRateLimit: ShouldRateLimit calls through gRPC over
// loopback, 64 callers on 4 connections, client and server in this
// process, for each backend and request shape (server.BenchLoads). "bare"
// is the baseline: the library's memstore behind the smallest RLS handler
// (one Limiter.Allow per descriptor, a status each, nothing else), through
// the same client. cpu-ns/op is the process's CPU time per call, client
// included.
func BenchmarkGRPCShouldRateLimit(b *testing.B) {
	for _, kind := range []string{"memory", "redis", "bare"} {
		b.Run(kind, func(b *testing.B) {
			var addr string
			if kind == "bare" {
				addr = startBare(b)
			} else {
				addr = startBench(b, kind).GRPCAddr()
			}
			clients := make([]rlspb.RateLimitServiceClient, benchConns)
			for i := range clients {
				conn, err := dial(addr)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { conn.Close() })
				clients[i] = rlspb.NewRateLimitServiceClient(conn)
			}
			for _, load := range server.BenchLoads {
				b.Run(load.Name, func(b *testing.B) { benchGRPC(b, clients, load) })
			}
		})
	}
}

func benchGRPC(b *testing.B, clients []rlspb.RateLimitServiceClient, load server.BenchLoad) {
	reqs := make([]*rlspb.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = load.Request(i)
	}
	var next, caller atomic.Int64
	b.SetParallelism(benchCallers / 2) // GOMAXPROCS 2 on the reference machine
	b.ReportAllocs()
	b.ResetTimer()
	cpu := server.StartCPU()
	b.RunParallel(func(pb *testing.PB) {
		c := clients[int(caller.Add(1))%len(clients)]
		ctx := context.Background()
		for pb.Next() {
			resp, err := c.ShouldRateLimit(ctx, reqs[int(next.Add(1))%len(reqs)])
			if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
				b.Errorf("%v %v", resp, err)
				return
			}
		}
	})
	cpu.Stop(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// bareRLS is the benchmarks' baseline: the library's memstore behind the
// least an RLS handler does.
type bareRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	lim   *ratewarden.Limiter
	limit ratewarden.Limit
}

func (r *bareRLS) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for _, d := range req.GetDescriptors() {
		var key strings.Builder
		key.WriteString(req.GetDomain())
		for _, e := range d.GetEntries() {
			key.WriteString("/" + e.GetKey() + "=" + e.GetValue())
		}
		res, err := r.lim.Allow(ctx, key.String(), r.limit)
		if err != nil {
			return nil, err
		}
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: uint32(res.Remaining)}
		if !res.Allowed {
			st.Code, resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// startBare serves bareRLS on a loopback port until b ends.
func startBare(b *testing.B) string {
	st, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	lim, err := ratewarden.New(st)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(g, &bareRLS{lim: lim, limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1e9, Period: time.Hour}})
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	return ln.Addr().String()
}

// BenchmarkHTTPCheck: POST /v1/check over loopback, 64 callers, 1000
// distinct keys, client and server in this process.
func BenchmarkHTTPCheck(b *testing.B) {
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			s := startBench(b, kind)
			url := "http://" + s.HTTPAddr() + "/v1/check"
			tr := &http.Transport{MaxIdleConnsPerHost: benchCallers}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			var n atomic.Int64
			b.SetParallelism(benchCallers / 2)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := server.StartCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := `{"key":"user-` + strconv.Itoa(int(n.Add(1)%1000)) + `","policy":"api"}`
					resp, err := client.Post(url, "application/json", strings.NewReader(body))
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
			cpu.Stop(b)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			server.NoDegraded(b, s)
		})
	}
}

// BenchmarkHTTPHandler is the service's own work per POST /v1/check,
// without a connection: the handler served in process (body parsing,
// policy lookup, the Limiter's store call, headers, the JSON answer and
// metrics), 64 callers, 1000 distinct keys or one hot key.
func BenchmarkHTTPHandler(b *testing.B) {
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			s := server.NewBenchServer(b, server.BenchBackend(b, kind))
			h := s.Handler()
			for _, load := range []struct {
				name string
				keys int
			}{{"keys", 1000}, {"hot", 1}} {
				b.Run(load.name, func(b *testing.B) {
					bodies := make([][]byte, load.keys)
					for i := range bodies {
						bodies[i] = []byte(`{"key":"user-` + strconv.Itoa(i) + `","policy":"api"}`)
					}
					var n atomic.Int64
					b.SetParallelism(benchCallers / 2)
					b.ReportAllocs()
					b.ResetTimer()
					cpu := server.StartCPU()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							r := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(bodies[int(n.Add(1))%len(bodies)]))
							r.Header.Set("Content-Type", "application/json")
							w := httptest.NewRecorder()
							h.ServeHTTP(w, r)
							if w.Code != http.StatusOK {
								b.Errorf("status %d: %s", w.Code, w.Body)
								return
							}
						}
					})
					cpu.Stop(b)
					server.NoDegraded(b, s)
				})
			}
		})
	}
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// BenchmarkHTTPHandlerBeyond is the service's work per pair of calls of
// the endpoints beyond admission, served in process as in
// BenchmarkHTTPHandler (64 callers, 1000 keys): acquire then release a
// permit, and reserve then settle a reservation, beside one /v1/check,
// the baseline of the same run. An op is a pair (or one check).
func BenchmarkHTTPHandlerBeyond(b *testing.B) {
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			s := server.NewBenchServer(b, server.BenchBackend(b, kind))
			h := s.Handler()
			// serve answers one request and returns the string member
			// field of its answer, found without decoding the rest.
			serve := func(path, body, field string) string {
				r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Errorf("%s: status %d: %s", path, w.Code, w.Body)
					return ""
				}
				if field == "" {
					return ""
				}
				_, v, _ := strings.Cut(w.Body.String(), `"`+field+`":"`)
				v, _, _ = strings.Cut(v, `"`)
				return v
			}
			pairs := map[string]func(key string){
				"check": func(key string) { serve("/v1/check", `{"key":"`+key+`","policy":"api"}`, "") },
				"acquire-release": func(key string) {
					if p := serve("/v1/acquire", `{"key":"`+key+`","policy":"slots"}`, "permit"); p != "" {
						serve("/v1/release", `{"permit":"`+p+`"}`, "")
					}
				},
				"reserve-settle": func(key string) {
					if r := serve("/v1/reserve", `{"key":"`+key+`","policy":"api","estimate":10}`, "reservation"); r != "" {
						serve("/v1/settle", `{"reservation":"`+r+`","actual":3}`, "")
					}
				},
			}
			for _, name := range []string{"check", "acquire-release", "reserve-settle"} {
				b.Run(name, func(b *testing.B) {
					var n atomic.Int64
					b.SetParallelism(benchCallers / 2)
					b.ReportAllocs()
					b.ResetTimer()
					cpu := server.StartCPU()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							pairs[name]("user-" + strconv.Itoa(int(n.Add(1)%1000)))
						}
					})
					cpu.Stop(b)
					server.NoDegraded(b, s)
				})
			}
		})
	}
}
