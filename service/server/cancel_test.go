package server_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const cancelConfig = `
policies:
  api: 10/1h fixed_window
---
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// TestCallerCancellationIsNotAStoreError: a caller that gives up (its
// context canceled) is not a store failure: it is neither logged as
// "store unavailable" nor counted in ratewarden_store_errors_total.
func TestCallerCancellationIsNotAStoreError(t *testing.T) {
	rs := testredis.Start(t)
	var logs logBuffer
	s := start(t, redisBackend(t, rs.Addr, backend.WithTimeout(5*time.Second)),
		server.WithConfig(parseConfig(t, cancelConfig)),
		server.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))

	// HTTP: the handler called with a request whose context is done.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, path := range []string{"/v1/check", "/v1/peek", "/v1/reset"} {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(`{"key":"k","policy":"api"}`))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code == http.StatusOK {
			t.Errorf("%s with a canceled context: 200 %s", path, rec.Body)
		}
	}

	// gRPC: an interceptor cancels the call's context before the service
	// runs, as a client that goes away does.
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return h(ctx, req)
	}))
	s.RegisterGRPC(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ln) }()
	defer func() { g.Stop(); <-served }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), requestCap)
	defer ccancel()
	_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.Canceled {
		t.Errorf("gRPC with a canceled context: %v, want Canceled", err)
	}

	if got := metric(t, s, "ratewarden_store_errors_total"); got != 0 {
		t.Errorf("ratewarden_store_errors_total = %v after caller cancellations", got)
	}
	if strings.Contains(logs.String(), "store unavailable") {
		t.Errorf("a caller's cancellation was logged as a store failure:\n%s", logs.String())
	}
	// The store itself is fine: nothing was consumed.
	if r := post(t, s, "/v1/peek", `{"key":"k","policy":"api","cost":10}`); r.body["allowed"] != true {
		t.Errorf("after cancellations: %s", r.raw)
	}
}
