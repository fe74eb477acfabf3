package main

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

// parseServe parses serve's arguments with env as the environment and
// returns the settings.
func parseServe(t *testing.T, env map[string]string, args ...string) (settings, error) {
	t.Helper()
	fs, f := newServeFlags(func(k string) string { return env[k] })
	if _, err := parseArgs(fs, args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return f.settings()
}

// TestServeSettings: the defaults, an environment variable standing in for
// a flag, a flag winning over its variable, and every value checked with
// an error naming the flag.
func TestServeSettings(t *testing.T) {
	st, err := parseServe(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := settings{httpAddr: ":8080", grpcAddr: ":8081", failure: fallback.LocalFallback, replicas: 1,
		redisTimeout: 50 * time.Millisecond, reload: time.Second, grace: 10 * time.Second, logLevel: slog.LevelInfo, maxKeyBytes: 1024,
		nearRatio: 0.8, tlsGRPC: true, tlsHTTP: true, gcHeadroom: 64 << 20}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("defaults %+v, want %+v", st, want)
	}
	env := map[string]string{"RATEWARDEN_CONFIG": "a.yaml,b", "RATEWARDEN_REPLICAS": "3", "RATEWARDEN_LOG_FORMAT": "json", "RATEWARDEN_HTTP_ADDR": ":1"}
	st, err = parseServe(t, env, "--replicas", "4", "--log-level", "debug", "--reload-interval", "0")
	if err != nil {
		t.Fatal(err)
	}
	if st.replicas != 4 || !reflect.DeepEqual(st.configPaths, []string{"a.yaml", "b"}) || !st.logJSON || st.httpAddr != ":1" || st.logLevel != slog.LevelDebug || st.reload != 0 {
		t.Errorf("env and flags: %+v", st)
	}
	env = map[string]string{"RATEWARDEN_INLINE_LIMITS": "true", "RATEWARDEN_ADMIN_ADDR": "127.0.0.1:9"}
	st, err = parseServe(t, env, "--max-key-bytes", "64")
	if err != nil {
		t.Fatal(err)
	}
	if !st.inline || st.maxKeyBytes != 64 || st.adminAddr != "127.0.0.1:9" {
		t.Errorf("exposure flags: %+v", st)
	}
	st, err = parseServe(t, map[string]string{"RATEWARDEN_LEASE_SIZE": "50"}, "--redis", "redis://127.0.0.1:1")
	if err != nil || st.leaseSize != 50 {
		t.Errorf("RATEWARDEN_LEASE_SIZE=50: lease size %d, %v", st.leaseSize, err)
	}
	for v, want := range map[string]uint64{"0": 0, "65536": 65536, "512KiB": 512 << 10, "2GiB": 2 << 30, "1024GiB": 1 << 40} {
		st, err = parseServe(t, map[string]string{"RATEWARDEN_GC_HEADROOM": v})
		if err != nil || st.gcHeadroom != want {
			t.Errorf("RATEWARDEN_GC_HEADROOM=%s: %d, %v; want %d", v, st.gcHeadroom, err, want)
		}
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--log-level", "loud"}},
		{[]string{"--log-format", "xml"}},
		{[]string{"--failure-policy", "sometimes"}},
		{[]string{"--replicas", "0"}},
		{[]string{"--redis-timeout", "0s"}},
		{[]string{"--reload-interval", "-1s"}},
		{[]string{"--shutdown-grace", "soon"}},
		{[]string{"--inline-limits=maybe"}},
		{[]string{"--max-key-bytes", "0"}},
		{[]string{"--max-key-bytes", "1k"}},
		{[]string{"--lease-size", "-1", "--redis", "redis://127.0.0.1:1"}},
		{[]string{"--lease-size", "lots", "--redis", "redis://127.0.0.1:1"}},
		{[]string{"--lease-size", "50"}}, // no --redis
		{[]string{"--gc-headroom", "64MB"}},
		{[]string{"--gc-headroom", "-1"}},
		{[]string{"--gc-headroom", "2TiB"}},
		{[]string{"--gc-headroom", "1025GiB"}},
	} {
		name, _, _ := strings.Cut(tc.args[0], "=")
		if _, err := parseServe(t, nil, tc.args...); err == nil || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("%q: err = %v, want one starting with %s", tc.args, err, name)
		}
	}
}

// TestServeEnvoyCompat: envoyproxy/ratelimit's settings from ratewarden's
// flags, their variables, or the peer's own variables, which lose to
// ratewarden's.
func TestServeEnvoyCompat(t *testing.T) {
	peerEnv := map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-L", "LIMIT_REMAINING_HEADER": "X-R",
		"LIMIT_RESET_HEADER": "X-T", "MERGE_DOMAIN_CONFIG": "true", "RESPONSE_DYNAMIC_METADATA": "true", "SHADOW_MODE": "true", "QUOTA_MODE": "true"}
	st, err := parseServe(t, peerEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := rls.EnvoyCompat{Headers: rls.HeadersEnvoy, LimitHeader: "X-L", RemainingHeader: "X-R", ResetHeader: "X-T",
		DynamicMetadata: true, ShadowMode: true, QuotaMode: true, MergeDomains: true}
	if st.envoy != want {
		t.Errorf("from the peer's variables: %+v, want %+v", st.envoy, want)
	}
	peerEnv["RATEWARDEN_SHADOW_MODE"] = "false"
	st, err = parseServe(t, peerEnv, "--rls-headers", "none", "--quota-mode=false")
	if err != nil {
		t.Fatal(err)
	}
	if st.envoy.Headers != rls.HeadersNone || st.envoy.ShadowMode || st.envoy.QuotaMode || !st.envoy.MergeDomains {
		t.Errorf("ratewarden's flags and variables win: %+v", st.envoy)
	}
	if st, err := parseServe(t, map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "false"}); err != nil || st.envoy.Headers != rls.HeadersNone {
		t.Errorf("LIMIT_RESPONSE_HEADERS_ENABLED=false: headers %v, %v; want none", st.envoy.Headers, err)
	}
	for _, args := range [][]string{{"--rls-headers", "peer"}, {"--merge-domains=perhaps"}, {"--shadow-mode=2"}} {
		name, _, _ := strings.Cut(args[0], "=")
		if _, err := parseServe(t, nil, args...); err == nil || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("%q: err = %v, want one starting with %s", args, err, name)
		}
	}
}

// TestServeReservationSecret: secrets from the flag or its variable, the
// first signing; a short one is refused without being shown.
func TestServeReservationSecret(t *testing.T) {
	const a, b = "first-secret-of-32-bytes-------!", "second-secret-16"
	st, err := parseServe(t, map[string]string{"RATEWARDEN_RESERVATION_SECRET": a + "," + b})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.secrets, [][]byte{[]byte(a), []byte(b)}) {
		t.Errorf("secrets %q", st.secrets)
	}
	_, err = parseServe(t, nil, "--reservation-secret", a+",too-short")
	if err == nil || !strings.HasPrefix(err.Error(), "--reservation-secret: secret 2 of 2 is 9 bytes") || strings.Contains(err.Error(), "too-short") || strings.Contains(err.Error(), a) {
		t.Errorf("a short secret: %v", err)
	}
}

// TestLeaseGiveBackWarning: closing the Redis backend of --lease-size
// gives a lease's unused units back quietly; when Redis is gone and they
// cannot go back, it says so in one line.
func TestLeaseGiveBackWarning(t *testing.T) {
	rs := testredis.Start(t)
	st, err := parseServe(t, nil, "--redis", "redis://"+rs.Addr, "--redis-timeout", "5s", "--lease-size", "10")
	if err != nil {
		t.Fatal(err)
	}
	hot := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}
	// leased opens a backend and admits twice from one key's lease.
	leased := func(logs *syncBuffer) func() {
		t.Helper()
		be, closeBackend, err := newBackend(st, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		store, err := be.Store(fallback.FailClosed)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratewarden.New(store)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if r, err := lim.Allow(t.Context(), "tenant", hot); err != nil || !r.Allowed {
				t.Fatalf("check: %+v, %v", r, err)
			}
		}
		return closeBackend
	}
	const warning = "not all given back to Redis"
	var up syncBuffer
	leased(&up)()
	if strings.Contains(up.String(), warning) {
		t.Errorf("leases given back to a running Redis, and yet:\n%s", up.String())
	}
	var down syncBuffer
	closeBackend := leased(&down)
	rs.Kill()
	closeBackend()
	if got := down.String(); !strings.Contains(got, warning) || !strings.Contains(got, "failures=1") || strings.Count(got, "\n") != 1 {
		t.Errorf("closing with the lease's units held and Redis gone, the log says:\n%s", got)
	}
}
