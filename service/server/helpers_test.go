package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLogger writes to the test log, so a failing test shows what the
// server said.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// memBackend is a fresh in-memory backend, closed at the end of the test.
func memBackend(t *testing.T) *backend.Memory {
	t.Helper()
	m, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// start runs a server on loopback ports until the test ends.
func start(t *testing.T, b decide.Backend, opts ...server.Option) *server.Server {
	t.Helper()
	opts = append([]server.Option{server.WithLogger(testLogger(t))}, opts...)
	s, err := server.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Connections the client dialed but never used look new to the
		// server, which waits up to 5 s for their first request: close them.
		http.DefaultClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

// rlsClient dials the server's gRPC address.
func rlsClient(t *testing.T, s *server.Server) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

func healthClient(t *testing.T, s *server.Server) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// desc builds a descriptor from key/value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func shouldRL(t *testing.T, c rlspb.RateLimitServiceClient, domain string, hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestCap)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	return resp
}

// httpResp is a decoded HTTP answer.
type httpResp struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func post(t *testing.T, s *server.Server, path string, body string, hdr ...string) httpResp {
	t.Helper()
	return do(t, http.MethodPost, "http://"+s.HTTPAddr()+path, body, hdr...)
}

func get(t *testing.T, s *server.Server, path string) httpResp {
	t.Helper()
	return do(t, http.MethodGet, "http://"+s.HTTPAddr()+path, "")
}

func do(t *testing.T, method, url, body string, hdr ...string) httpResp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestCap)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := httpResp{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	_ = json.Unmarshal(b, &r.body) // not every answer is JSON
	return r
}

// Caps on waits, far above what they take, so that a busy machine makes a
// test slower but never fails it:
const (
	requestCap = 30 * time.Second // one request, or a shutdown
	waitCap    = 60 * time.Second // a state the test brought about (eventually)
)

// alignWindow waits, when less than margin is left in the current
// epoch-aligned window of period, for the next one to start, so that a
// test's requests on a fixed window all land in one window: the test may
// then take up to margin. If the test fails and ran past the window's
// end, that is said too.
func alignWindow(t *testing.T, period, margin time.Duration) {
	t.Helper()
	left := period - time.Duration(time.Now().UnixNano())%period
	if left < margin {
		time.Sleep(left + 5*time.Millisecond)
		left = period - time.Duration(time.Now().UnixNano())%period
	}
	end := time.Now().Add(left)
	t.Cleanup(func() {
		if t.Failed() && time.Now().After(end) {
			t.Logf("the test ran past the end of its %v window (it had %v), so counts may have restarted: a busy machine?", period, left.Round(time.Millisecond))
		}
	})
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func examplePath(name string) string { return filepath.Join("..", "..", "examples", "config", name) }

// metric returns the sum of the samples of name whose labels include all
// of the given label="value" pairs, from the server's /metrics text.
func metric(t *testing.T, s *server.Server, name string, labels ...string) float64 {
	t.Helper()
	r := get(t, s, "/metrics")
	var sum float64
	for _, line := range strings.Split(r.raw, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
