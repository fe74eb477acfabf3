package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

// ExampleWithEnvoyCompat answers as envoyproxy/ratelimit does with
// LIMIT_RESPONSE_HEADERS_ENABLED=true: its three headers, for the
// descriptor over its limit (a requests_per_unit 0 block list here).
func ExampleWithEnvoyCompat() {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	cfg, err := config.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /admin
    rate_limit: {unit: second, requests_per_unit: 0}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := server.New(b, server.WithConfig(cfg), server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithEnvoyCompat(rls.EnvoyCompat{Headers: rls.HeadersEnvoy}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	entry := func(k, v string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{
		Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{entry("user", "ann"), entry("path", "/admin")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetOverallCode())
	for _, st := range resp.GetStatuses() {
		fmt.Println(st.GetCode(), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration() > 0)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Printf("%s: %s\n", h.GetKey(), h.GetValue())
	}
	// Output:
	// OVER_LIMIT
	// OK 100 true
	// OVER_LIMIT 0 true
	// RateLimit-Limit: 0
	// RateLimit-Remaining: 0
	// RateLimit-Reset: 1
}
