package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// TestPeerEnvMapping: each of envoyproxy/ratelimit's variables becomes
// the setting it means, and ratewarden's own variables win.
func TestPeerEnvMapping(t *testing.T) {
	env := map[string]string{
		"PORT": "18080", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "18081", "DEBUG_PORT": "16070",
		"LOG_LEVEL": "TRACE", "LOG_FORMAT": "JSON", "RUNTIME_ROOT": "/srv/rt", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"REDIS_URL": "redis.internal:6380", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SINGLE", "REDIS_AUTH": "u:p@ss", "REDIS_TLS": "true",
		"REDIS_TIMEOUT": "2s", "REDIS_TLS_CACERT": "/ca.pem", "NEAR_LIMIT_RATIO": "0.9",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem",
		"CONFIG_TYPE": "FILE", "USE_STATSD": "false", "LOCAL_CACHE_SIZE_IN_BYTES": "1000",
	}
	getenv, ignored, err := peerEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	fs, f := newServeFlags(getenv)
	if _, err := parseArgs(fs, nil); err != nil {
		t.Fatal(err)
	}
	st, err := f.settings()
	if err != nil {
		t.Fatal(err)
	}
	if st.httpAddr != ":18080" || st.grpcAddr != "127.0.0.1:18081" || st.adminAddr != ":16070" {
		t.Errorf("addresses %q %q %q", st.httpAddr, st.grpcAddr, st.adminAddr)
	}
	if st.logLevel.String() != "DEBUG" || !st.logJSON || !reflect.DeepEqual(st.configPaths, []string{"/srv/rt/ratelimit/config"}) {
		t.Errorf("log %v json %v config %v", st.logLevel, st.logJSON, st.configPaths)
	}
	if st.redisURL != "rediss://u:p%40ss@redis.internal:6380" || st.redisTimeout != 2*time.Second || st.redisTLS.CAFile != "/ca.pem" {
		t.Errorf("redis %q %v %+v", st.redisURL, st.redisTimeout, st.redisTLS)
	}
	if st.nearRatio != 0.9 || st.tls.CertFile != "/c.pem" || st.tls.KeyFile != "/k.pem" || !st.tlsGRPC || st.tlsHTTP {
		t.Errorf("near %v tls %+v grpc %v http %v", st.nearRatio, st.tls, st.tlsGRPC, st.tlsHTTP)
	}
	if len(ignored) != 2 || !strings.HasPrefix(ignored[0], "LOCAL_CACHE_SIZE_IN_BYTES: ") || !strings.HasPrefix(ignored[1], "USE_STATSD: ") {
		t.Errorf("ignored: %q", ignored)
	}
	// Ours win.
	env["RATEWARDEN_HTTP_ADDR"], env["RATEWARDEN_REDIS_URL"] = ":1", "redis://other:1"
	getenv, _, _ = peerEnv(func(k string) string { return env[k] })
	if getenv("RATEWARDEN_HTTP_ADDR") != ":1" || getenv("RATEWARDEN_REDIS_URL") != "redis://other:1" {
		t.Error("RATEWARDEN_ variables do not win over the peer's")
	}
	// Envoy Gateway's environment: xDS with RUNTIME_ set, Prometheus.
	eg := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "eg.svc:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_PATH": "/metrics",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.svc:6379"}
	getenv, ignored, err = peerEnv(func(k string) string { return eg[k] })
	if err != nil {
		t.Fatal(err)
	}
	fs, f = newServeFlags(getenv)
	if _, err := parseArgs(fs, nil); err != nil {
		t.Fatal(err)
	}
	st, err = f.settings()
	if err != nil {
		t.Fatalf("Envoy Gateway's environment: %v", err)
	}
	if st.xds == nil || st.xds.server != "eg.svc:18001" || st.xds.nodeID != "envoy-ratelimit" || st.configPaths != nil || st.adminAddr != ":19001" || st.redisURL != "redis://redis.svc:6379" {
		t.Errorf("Envoy Gateway's environment: xds %+v config %v admin %q redis %q", st.xds, st.configPaths, st.adminAddr, st.redisURL)
	}
	if len(ignored) != 1 || !strings.HasPrefix(ignored[0], "FORCE_START_WITHOUT_INITIAL_CONFIG") {
		t.Errorf("Envoy Gateway's environment, ignored: %q", ignored)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_URL": "h1:7000,h2:7001", "REDIS_TYPE": "cluster"}, "redis://h1:7000,h2:7001"},
		{map[string]string{"REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_TYPE": "SENTINEL", "REDIS_SENTINEL_AUTH": "spw"}, "redis-sentinel://s1:26379,s2:26379/mymaster?sentinel_password=spw"},
		{map[string]string{"REDIS_URL": "/var/run/redis.sock", "REDIS_AUTH": "pw"}, "unix://:pw@/var/run/redis.sock"},
		{map[string]string{"REDIS_URL": "redis://x:1/2"}, "redis://x:1/2"},
	} {
		got, err := peerRedisURL(func(k string) string { return tc.env[k] })
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
	for _, bad := range []map[string]string{{"BACKEND_TYPE": "memcache"}, {"MEMCACHE_HOST_PORT": "m:11211"}, {"GRPC_UDS": "/s"}, {"REDIS_URL": "h:1", "REDIS_TYPE": "RING"}} {
		if _, _, err := peerEnv(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// served is a running `serve`: its addresses from its startup log.
type served struct {
	http, grpc, admin string
	logs              *syncBuffer
}

var listening = regexp.MustCompile(`"msg":"listening","http":"([^"]+)","grpc":"([^"]+)"(?:,"admin":"([^"]+)")?`)

// startServe runs `serve args` with env as its whole environment until
// the test ends, and waits for it to listen.
func startServe(t *testing.T, env map[string]string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{logs: &syncBuffer{}}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), &bytes.Buffer{}, s.logs, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exit %d:\n%s", code, s.logs.String())
			}
		case <-time.After(time.Minute):
			t.Errorf("serve did not stop within a minute:\n%s", s.logs.String())
		}
	})
	deadline := time.Now().Add(time.Minute) // startup takes milliseconds; the machine may be busy
	for {
		if m := listening.FindStringSubmatch(s.logs.String()); m != nil {
			s.http, s.grpc, s.admin = m[1], m[2], m[3]
			return s
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d:\n%s", code, s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen within a minute:\n%s", s.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const peerDomain = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /login
    descriptors:
      - key: ip
        rate_limit: {unit: hour, requests_per_unit: 2}
`

// decisions sends the same sequence of requests to addr and returns the
// answers with their durations cleared.
func decisions(t *testing.T, conn *grpc.ClientConn) []*rlspb.RateLimitResponse {
	t.Helper()
	c := rlspb.NewRateLimitServiceClient(conn)
	reqs := []*rlspb.RateLimitRequest{}
	for i := 0; i < 4; i++ {
		reqs = append(reqs, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}})
	}
	for i := 0; i < 3; i++ {
		reqs = append(reqs, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/login"}, {Key: "ip", Value: "10.0.0.1"}}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u2"}}},
		}})
	}
	var out []*rlspb.RateLimitResponse
	for _, r := range reqs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := c.ShouldRateLimit(ctx, r)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range resp.Statuses {
			st.DurationUntilReset = nil
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if h.Key == "RateLimit-Reset" {
				h.Value = "<reset>"
			}
		}
		out = append(out, resp)
	}
	return out
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestPeerEnvServesAsFlags is the second acceptance test: a
// service started with only envoyproxy/ratelimit's variables answers as
// one started with the equivalent flags, each on a real redis-server of
// its own.
func TestPeerEnvServesAsFlags(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ratelimit", "config"), "edge.yaml", peerDomain)
	r1, r2 := testredis.Start(t), testredis.Start(t)
	ports := make([]string, 3)
	for i := range ports {
		p, err := testredis.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = strconv.Itoa(p)
	}
	peer := startServe(t, map[string]string{
		"HOST": "127.0.0.1", "PORT": ports[0], "GRPC_HOST": "127.0.0.1", "GRPC_PORT": ports[1], "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": ports[2],
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SINGLE", "REDIS_URL": r1.Addr, "REDIS_TIMEOUT": "1s",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LOG_LEVEL": "info", "LOG_FORMAT": "json", "USE_STATSD": "false",
	})
	ours := startServe(t, map[string]string{}, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--redis", "redis://"+r2.Addr, "--redis-timeout", "1s", "--config", filepath.Join(root, "ratelimit", "config"),
		"--rls-headers", "envoy", "--log-format", "json")
	if peer.grpc != "127.0.0.1:"+ports[1] || peer.http != "127.0.0.1:"+ports[0] || peer.admin != "127.0.0.1:"+ports[2] {
		t.Errorf("peer's addresses: %+v, want ports %v", peer, ports)
	}
	if !strings.Contains(peer.logs.String(), `"msg":"deciding on Redis"`) || !strings.Contains(peer.logs.String(), "USE_STATSD: ") {
		t.Errorf("peer-configured service: no Redis or no word on USE_STATSD:\n%s", peer.logs.String())
	}
	a, b := decisions(t, dialPlain(t, peer.grpc)), decisions(t, dialPlain(t, ours.grpc))
	overs := 0
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			t.Errorf("request %d: peer environment %v, flags %v", i, a[i], b[i])
		}
		if a[i].OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			overs++
		}
	}
	if overs != 2 {
		t.Errorf("%d answers over the limit, want 2 (4th user hit, 3rd login)", overs)
	}
}
