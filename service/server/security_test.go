package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/api"
)

// hostile is the 80-byte request of issue 15: a caller-chosen sliding log
// of 10000 entries kept for 366 days.
const hostile = `{"key":"sl-1","limit":"10000/366d sliding_log","cost":10000}`

// usedMemory is redis-server's INFO memory used_memory.
func usedMemory(t *testing.T, rs *testredis.Server) int64 {
	t.Helper()
	info, err := rs.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory: %q", info)
	return 0
}

// isProblem fails the test unless r is a problem+json of status with a
// ratewarden problem type, whose detail contains want.
func isProblem(t *testing.T, what string, r httpResp, status int, want string) {
	t.Helper()
	typ, _ := r.body["type"].(string)
	detail, _ := r.body["detail"].(string)
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" ||
		!strings.HasPrefix(typ, api.ProblemBase) || !strings.Contains(detail, want) {
		t.Fatalf("%s: want a %d problem saying %q, got %d %s %s", what, status, want, r.status, r.header.Get("Content-Type"), r.raw)
	}
}

// TestInlineLimitsAreTheOperatorsDecision: the hostile request is refused
// by default, and above the maxima when inline limits are on; 1000 of them
// leave Redis memory where it was.
func TestInlineLimitsAreTheOperatorsDecision(t *testing.T) {
	rs := testredis.Start(t)
	cfg := parseConfig(t, httpPolicies)
	off := start(t, redisBackend(t, rs.Addr, backend.WithTimeout(5*time.Second)), server.WithConfig(cfg))
	on := start(t, redisBackend(t, rs.Addr, backend.WithTimeout(5*time.Second)), server.WithConfig(cfg),
		server.WithInlineLimits(config.InlineLimits{Enabled: true}))
	isProblem(t, "default", post(t, off, "/v1/check", hostile), 403, "--inline-limits")
	isProblem(t, "reset, default", post(t, off, "/v1/reset", `{"key":"k","limit":"1/1s"}`), 403, "inline_limits.enabled")
	isProblem(t, "on", post(t, on, "/v1/check", hostile), 400, "inline_limits.max_period 1h")
	isProblem(t, "log size", post(t, on, "/v1/check", `{"key":"k","limit":"10000/1m sliding_log"}`), 400, "max_sliding_log 1000")
	isProblem(t, "cost", post(t, on, "/v1/check", `{"key":"k","limit":"5000/1m fixed_window","cost":5000}`), 400, "max_cost 1000")
	if r := post(t, on, "/v1/check", `{"key":"k","limit":"10/1m"}`); r.status != 200 {
		t.Fatalf("within the maxima: %d %s", r.status, r.raw)
	}
	// A config file's inline_limits turns them on and sets the maxima.
	fileOn := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies+"inline_limits: {enabled: true, max_period: 1m, max_cost: 5}\n")))
	isProblem(t, "file maxima", post(t, fileOn, "/v1/check", `{"key":"k","limit":"10/2m"}`), 400, "max_period 1m")
	if r := post(t, fileOn, "/v1/check", `{"key":"k","limit":"10/1m","cost":5}`); r.status != 200 {
		t.Fatalf("within the file's maxima: %d %s", r.status, r.raw)
	}

	if _, err := rs.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	before := usedMemory(t, rs)
	for i := range 1000 {
		s, want := off, 403
		if i%2 == 1 {
			s, want = on, 400
		}
		body := strings.Replace(hostile, "sl-1", "sl-"+strconv.Itoa(i), 1)
		if r := post(t, s, "/v1/check", body); r.status != want {
			t.Fatalf("hostile request %d: %d %s", i, r.status, r.raw)
		}
	}
	after := usedMemory(t, rs)
	t.Logf("Redis used_memory: %d -> %d bytes (%+d) after 1000 hostile requests", before, after, after-before)
	if after-before >= 1<<20 {
		t.Errorf("Redis memory grew by %d bytes, want < 1 MiB", after-before)
	}
	if n, err := rs.Do("DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE %q, %v: hostile requests created keys", n, err)
	}
}

// TestKeyCap: 2000 requests with distinct 60 KB keys each get 400 naming
// the cap, and the in-process server's heap (runtime.MemStats.HeapInuse,
// after GC; this test process holds the server) grows by less than 10 MB.
func TestKeyCap(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)))
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	key := []byte(strings.Repeat("k", 60_000))
	isProblem(t, "warm-up", post(t, s, "/v1/check", `{"key":"`+string(key)+`","policy":"api"}`), 400, "the cap is 1024 bytes")
	before := heap()
	for i := range 2000 {
		copy(key, fmt.Sprintf("%08d", i))
		r := post(t, s, "/v1/check", `{"key":"`+string(key)+`","policy":"api"}`)
		if r.status != 400 || !strings.Contains(r.raw, "key-too-long") {
			t.Fatalf("request %d: %d %s", i, r.status, r.raw)
		}
	}
	after := heap()
	t.Logf("HeapInuse: %d -> %d bytes (%+d) after 2000 distinct 60 KB keys", before, after, int64(after)-int64(before))
	if int64(after)-int64(before) >= 10<<20 {
		t.Errorf("heap grew by %d bytes, want < 10 MB", int64(after)-int64(before))
	}
	// The cap is configurable, and a key at the cap passes.
	small := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithMaxKeyBytes(8))
	if r := post(t, small, "/v1/check", `{"key":"12345678","policy":"api"}`); r.status != 200 {
		t.Fatalf("key at the cap: %d %s", r.status, r.raw)
	}
	isProblem(t, "over a cap of 8", post(t, small, "/v1/peek", `{"key":"123456789","policy":"api"}`), 400, "the cap is 8 bytes")
	if _, err := server.New(memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithMaxKeyBytes(0)); err == nil || !strings.Contains(err.Error(), "WithMaxKeyBytes") {
		t.Errorf("WithMaxKeyBytes(0): %v", err)
	}
}

// TestGRPCKeyCapAndFieldPaths: the same cap on Envoy descriptors, each
// refusal INVALID_ARGUMENT with the field path.
func TestGRPCKeyCapAndFieldPaths(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")))
	c := rlsClient(t, s)
	long := strings.Repeat("v", 2000)
	half := strings.Repeat("v", 600)
	for _, tc := range []struct {
		ds   []string
		want string
	}{
		{[]string{"user", long}, "descriptors[1].entries[0].value: 2000 bytes; the cap is 1024 bytes"},
		{[]string{long, "x"}, "descriptors[1].entries[0].key: 2000 bytes"},
		{[]string{"user", half, "user", half}, "descriptors[1]: domain and entries make a key of 1213 bytes; the cap is 1024 bytes"},
		{[]string{"user", "a", "", "b"}, "descriptors[1].entries[1].key: key is required"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "ok"), desc(tc.ds...)}})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%.40q: %v, want InvalidArgument %q", tc.ds, err, tc.want)
		}
	}
	// Nothing was consumed by the refused requests.
	if resp := shouldRL(t, c, "d", 5, desc("user", "ok")); resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("after refused requests: %v", resp)
	}
	// A descriptor within the cap whose every byte is escaped in the store
	// key (three times as long) is decided, not refused by the store.
	escaped := strings.Repeat("%", 1000)
	if resp := shouldRL(t, c, "d", 1, desc("user", escaped)); resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("a 1000-byte value that escapes to 3000 bytes: %v", resp)
	}
}

// TestStrictParsing: content type, UTF-8, duplicate members, the auth
// scheme's case, and problem+json for 404 and 405.
func TestStrictParsing(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithAPIToken("s3cret"))
	auth := []string{"Authorization", "Bearer s3cret"}
	body := `{"key":"k","policy":"api"}`
	isProblem(t, "text/plain", post(t, s, "/v1/check", body, append(auth, "Content-Type", "text/plain")...), 415, "application/json")
	isProblem(t, "no content type", post(t, s, "/v1/reset", body, append(auth, "Content-Type", "")...), 415, "application/json")
	isProblem(t, "form", post(t, s, "/v1/peek", body, append(auth, "Content-Type", "application/x-www-form-urlencoded")...), 415, "application/json")
	if r := post(t, s, "/v1/peek", body, append(auth, "Content-Type", "application/json; charset=utf-8")...); r.status != 200 {
		t.Fatalf("charset=utf-8: %d %s", r.status, r.raw)
	}
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		if r := post(t, s, "/v1/peek", body, "Authorization", scheme+" s3cret"); r.status != 200 {
			t.Fatalf("scheme %q: %d %s", scheme, r.status, r.raw)
		}
	}
	isProblem(t, "wrong token", post(t, s, "/v1/peek", body, "Authorization", "bearer nope"), 401, "bearer token")
	for _, bad := range []struct{ name, body, want string }{
		{"invalid UTF-8 e9", "{\"key\":\"caf\xe9\",\"policy\":\"api\"}", "not valid UTF-8"},
		{"invalid UTF-8 e8", "{\"key\":\"caf\xe8\",\"policy\":\"api\"}", "not valid UTF-8"},
		{"lone surrogate", `{"key":"caf\ud800","policy":"api"}`, `field "key": invalid UTF-8`},
		{"U+FFFD", `{"key":"caf\ufffd","policy":"api"}`, `field "key": invalid UTF-8`},
		{"duplicate key", `{"key":"a","key":"b","policy":"api"}`, `member "key" given twice`},
		{"duplicate policy", `{"key":"a","policy":"api","policy":"api"}`, `member "policy" given twice`},
	} {
		isProblem(t, bad.name, post(t, s, "/v1/check", bad.body, auth...), 400, bad.want)
	}
	// Nothing was consumed.
	if r := post(t, s, "/v1/peek", `{"key":"a","policy":"api","cost":3}`, auth...); r.body["remaining"] != float64(3) {
		t.Fatalf("after refused requests: %s", r.raw)
	}
	r := get(t, s, "/v1/check")
	isProblem(t, "GET /v1/check", r, 405, "POST")
	if r.header.Get("Allow") != "POST" {
		t.Errorf("Allow %q", r.header.Get("Allow"))
	}
	isProblem(t, "POST /readyz", post(t, s, "/readyz", ""), 405, "GET")
	isProblem(t, "unknown path", get(t, s, "/v2/check"), 404, "no such endpoint")
	isProblem(t, "root", get(t, s, "/"), 404, "no such endpoint")
}

// TestAdminAddr: with an admin address, /metrics and the detailed /readyz
// move there; the API address keeps /healthz and a bare /readyz.
func TestAdminAddr(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithAdminAddr("127.0.0.1:0"))
	if s.AdminAddr() == "" || s.AdminAddr() == s.HTTPAddr() {
		t.Fatalf("admin address %q", s.AdminAddr())
	}
	isProblem(t, "/metrics on the API address", get(t, s, "/metrics"), 404, "no such endpoint")
	admin := "http://" + s.AdminAddr()
	if r := do(t, "GET", admin+"/metrics", ""); r.status != 200 || !strings.Contains(r.raw, "ratewarden_config_last_reload_successful 1") {
		t.Fatalf("admin /metrics: %d", r.status)
	}
	for _, url := range []string{admin + "/readyz", "http://" + s.HTTPAddr() + "/readyz"} {
		if r := do(t, "GET", url, ""); r.status != 200 || r.raw != "ready\n" {
			t.Fatalf("%s: %d %q", url, r.status, r.raw)
		}
	}
	isProblem(t, "/v1 on the admin address", do(t, "POST", admin+"/v1/check", `{"key":"k","policy":"api"}`), 404, "no such endpoint")
	if _, err := server.New(memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithAdminAddr("256.0.0.1:x")); err != nil {
		t.Fatalf("New does not listen: %v", err)
	}
}

// TestErrorsLeakNothing: with Redis killed, /readyz and every /v1 error
// body say nothing of addresses, ports, keys or Go errors.
func TestErrorsLeakNothing(t *testing.T) {
	rs := testredis.Start(t)
	_, port, err := net.SplitHostPort(rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, "policies:\n  closed: {limit: 5/1m, failure_policy: fail_closed}\n  open: {limit: 5/1m, failure_policy: fail_open}\n  local: {limit: 5/1m, failure_policy: local_fallback}\n")
	b := redisBackend(t, rs.Addr, backend.WithTimeout(200*time.Millisecond))
	s := start(t, b, server.WithConfig(cfg), server.WithInlineLimits(config.InlineLimits{Enabled: true}))
	eventually(t, waitCap, "/readyz 200 before the outage", func() bool { return get(t, s, "/readyz").status == 200 })
	rs.Kill()
	eventually(t, waitCap, "/readyz 503", func() bool { return get(t, s, "/readyz").status == 503 })

	const key = "secret-caller-key-4711"
	forbidden := []string{rs.Addr, port, "127.0.0.1", key, "dial", "tcp", "refused", "redis", "EOF", "context", "server:", "ratewarden:", "%!"}
	check := func(what, body string) {
		t.Helper()
		for _, f := range forbidden {
			if strings.Contains(body, f) {
				t.Errorf("%s body says %q: %s", what, f, body)
			}
		}
	}
	r := get(t, s, "/readyz")
	if !strings.Contains(r.raw, "fail_closed") || !strings.Contains(r.raw, "local_fallback") || strings.Contains(r.raw, "fail_open") {
		t.Errorf("/readyz does not name the degraded failure policies: %q", r.raw)
	}
	check("/readyz", r.raw)
	errorsSeen := 0
	for _, path := range []string{"/v1/check", "/v1/peek", "/v1/reset"} {
		for _, pol := range []string{`"policy":"closed"`, `"policy":"open"`, `"policy":"local"`, `"limit":"5/1m"`} {
			r := post(t, s, path, `{"key":"`+key+`",`+pol+`}`)
			if r.status < 400 {
				continue
			}
			errorsSeen++
			isProblem(t, path+" "+pol, r, 503, "retry later")
			check(path+" "+pol, r.raw)
		}
	}
	if errorsSeen == 0 {
		t.Fatal("no /v1 request failed with Redis killed: the test checked nothing")
	}
	t.Logf("%d /v1 error bodies checked", errorsSeen)
}

// rawCodec sends []byte as the encoded message: the only way to put
// invalid UTF-8 on the wire, as grpc-go's own codec refuses to encode it.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// TestGRPCInvalidUTF8: a descriptor value that is not UTF-8 is
// INVALID_ARGUMENT with its field path, not grpc-go's INTERNAL; distinct
// invalid values never share a counter.
func TestGRPCInvalidUTF8(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")))
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	valid, err := proto.Marshal(&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "ok"), desc("user", "x", "user", "caf_")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"caf_", "caf\xe9", "descriptors[1].entries[1].value: invalid UTF-8"},
		{"caf_", "caf\xe8", "descriptors[1].entries[1].value: invalid UTF-8"},
		{"user\x12\x04caf_", "use\xff\x12\x04caf_", "descriptors[1].entries[1].key: invalid UTF-8"},
		{"\x0a\x01d", "\x0a\x01\xfe", "domain: invalid UTF-8"},
	} {
		b := bytes.Replace(valid, []byte(tc.from), []byte(tc.to), 1)
		if bytes.Equal(b, valid) {
			t.Fatalf("%q not in the encoded request", tc.from)
		}
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		var resp rlspb.RateLimitResponse
		err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", b, &resp, grpc.ForceCodec(rawCodec{}))
		cancel()
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
			t.Errorf("%q: %v, want InvalidArgument %q", tc.to, err, tc.want)
		}
	}
	// The valid request still decodes through the server's codec.
	if resp := shouldRL(t, rlsClient(t, s), "d", 1, desc("user", "ok")); resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("valid request: %v", resp)
	}
}

// Many tiny entries: the separators between them count toward the key
// cap, so a descriptor the cap lets through always fits the store's key;
// this one is refused by the cap with its path, not by the store.
func TestGRPCKeyCapCountsSeparators(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")))
	c := rlsClient(t, s)
	d := &rlcommon.RateLimitDescriptor{Limit: &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typepb.RateLimitUnit_MINUTE}}
	for range 1000 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "%"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestCap)
	defer cancel()
	_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "descriptors[0]: domain and entries make a key of") {
		t.Fatalf("1000 entries of one byte: %v, want InvalidArgument from the key cap naming descriptors[0]", err)
	}
}

// A JSON type error is told in JSON's terms, never with Go type names.
func TestTypeErrorsSayJSON(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)))
	isProblem(t, "array body", post(t, s, "/v1/check", `[]`), 400, "want a JSON object")
	isProblem(t, "fractional cost", post(t, s, "/v1/check", `{"key":"k","policy":"api","cost":1.5}`), 400, `field "cost": want a whole number`)
	for _, body := range []string{`[]`, `{"key":"k","policy":"api","cost":1.5}`} {
		if r := post(t, s, "/v1/check", body); strings.Contains(r.raw, "server.") || strings.Contains(r.raw, "int64") {
			t.Errorf("%s: body names Go types: %s", body, r.raw)
		}
	}
}
