package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// TestServeXDS: `serve` with envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW
// takes its Envoy domains from an in-process go-control-plane server and
// reports the version on /rlconfig and /metrics (admin address).
func TestServeXDS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	g := grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, cache, nil))
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	rc := &rlsconfpb.RateLimitConfig{Name: "gw", Domain: "edge", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: 4}},
	}}
	snap, err := cachev3.NewSnapshot("gw-1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {rc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(ctx, "ratelimit-node", snap); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ln.Addr().String(),
		"CONFIG_GRPC_XDS_NODE_ID": "ratelimit-node", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms"},
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-format", "json")
	c := rlspb.NewRateLimitServiceClient(dialPlain(t, s.grpc))
	start := time.Now()
	var limit uint32
	for i := 0; i < 500 && limit != 4; i++ {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := c.ShouldRateLimit(rctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "probe"}}}}})
		rcancel()
		if err != nil {
			t.Fatal(err)
		}
		limit = resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
		if limit != 4 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if limit != 4 {
		t.Fatalf("after %v the xDS limit is not enforced:\n%s", time.Since(start), s.logs.String())
	}
	t.Logf("xDS limit enforced %v after serve listened", time.Since(start).Round(time.Millisecond))
	for path, want := range map[string]string{
		"/rlconfig": "# version: gw-1\n",
		"/metrics":  `ratewarden_config_info{source="xds",version="gw-1"} 1`,
		"/metrics ": `ratewarden_xds_updates_total{result="accepted"} 1`,
	} {
		resp, err := http.Get("http://" + s.admin + strings.TrimSpace(path))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", path, want, b)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
