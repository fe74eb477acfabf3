package main

import (
	"context"
	"crypto/tls"
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
	"google.golang.org/grpc/credentials"
)

// TestServeXDS: `serve` with envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW
// takes its Envoy domains from an in-process go-control-plane server and
// reports the version on /rlconfig and /metrics (admin address).
func TestServeXDS(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) { testServeXDS(t, false) })
	// CONFIG_GRPC_XDS_SERVER_USE_TLS with the CA and SAN variables, and a
	// client certificate the management server requires.
	t.Run("mutual TLS", func(t *testing.T) { testServeXDS(t, true) })
}

func testServeXDS(t *testing.T, useTLS bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": ln.Addr().String(),
		"CONFIG_GRPC_XDS_NODE_ID": "ratelimit-node", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms"}
	var gopts []grpc.ServerOption
	if useTLS {
		dir := t.TempDir()
		ca := newCA(t, dir)
		scert, skey := ca.issue(t, dir, "xds", "xds.test", false)
		ccert, ckey := ca.issue(t, dir, "client", "ratelimit", true)
		pair, err := tls.LoadX509KeyPair(scert, skey)
		if err != nil {
			t.Fatal(err)
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert})))
		env["CONFIG_GRPC_XDS_SERVER_USE_TLS"] = "true"
		env["CONFIG_GRPC_XDS_SERVER_TLS_CACERT"] = ca.file
		env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = "xds.test"
		env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"], env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = ccert, ckey
	}
	g := grpc.NewServer(gopts...)
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
	s := startServe(t, env, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--log-format", "json")
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
