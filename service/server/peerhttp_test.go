package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

const jsonDomain = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /login
    descriptors:
      - key: ip
        rate_limit: {unit: minute, requests_per_unit: 2, name: login}
`

// TestJSONEndpoint: /json decides as ShouldRateLimit, in protobuf JSON,
// with envoyproxy/ratelimit's status codes (200, 429, 400).
func TestJSONEndpoint(t *testing.T) {
	alignWindow(t, 60e9, 5e9)
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, jsonDomain)), server.WithEnvoyCompat(rls.EnvoyCompat{Headers: rls.HeadersNone}))
	req := `{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"},{"key":"ip","value":"10.0.0.1"}]}]}`
	r := post(t, s, "/json", req)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("first: %d %s %s", r.status, r.header.Get("Content-Type"), r.raw)
	}
	if r.body["overallCode"] != "OK" {
		t.Errorf("first: %s", r.raw)
	}
	st := r.body["statuses"].([]any)[0].(map[string]any)
	if st["limitRemaining"] != float64(1) || st["currentLimit"].(map[string]any)["name"] != "login" {
		t.Errorf("first status: %s", r.raw)
	}
	post(t, s, "/json", req)
	r = post(t, s, "/json", req)
	if r.status != http.StatusTooManyRequests || r.body["overallCode"] != "OVER_LIMIT" {
		t.Errorf("third: %d %s", r.status, r.raw)
	}
	for name, body := range map[string]string{
		"not JSON":       `{`,
		"unknown field":  `{"domain":"edge","nope":1}`,
		"no descriptors": `{"domain":"edge"}`,
	} {
		if r := post(t, s, "/json", body); r.status != http.StatusBadRequest || r.raw != "Bad Request\n" {
			t.Errorf("%s: %d %q, want 400 Bad Request", name, r.status, r.raw)
		}
	}
	// An unknown domain is OK, as over gRPC.
	if r := post(t, s, "/json", `{"domain":"other","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`); r.status != http.StatusOK || r.body["overallCode"] != "OK" {
		t.Errorf("unknown domain: %d %s", r.status, r.raw)
	}
}

// TestJSONEndpointToken: with an API token, /json needs it as /v1 does.
func TestJSONEndpointToken(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, jsonDomain)), server.WithAPIToken("sekret"))
	req := `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`
	if r := post(t, s, "/json", req); r.status != http.StatusUnauthorized {
		t.Errorf("without the token: %d", r.status)
	}
	if r := post(t, s, "/json", req, "Authorization", "Bearer sekret"); r.status != http.StatusOK {
		t.Errorf("with the token: %d %s", r.status, r.raw)
	}
}

// TestHealthcheckAndConfigDump: /healthcheck answers 200 "OK" until the
// server shuts down; /rlconfig lists the limits with the version, on the
// admin address when there is one.
func TestHealthcheckAndConfigDump(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, "policies: {api: 5/1s}\n")), server.WithAdminAddr("127.0.0.1:0"))
	if r := get(t, s, "/healthcheck"); r.status != http.StatusOK || r.raw != "OK" {
		t.Errorf("/healthcheck: %d %q", r.status, r.raw)
	}
	if r := get(t, s, "/rlconfig"); r.status != http.StatusNotFound {
		t.Errorf("/rlconfig on the API address with an admin address: %d", r.status)
	}
	if err := s.SetConfig(parseConfig(t, jsonDomain), "xds", "v7"); err != nil {
		t.Fatal(err)
	}
	r := do(t, http.MethodGet, "http://"+s.AdminAddr()+"/rlconfig", "")
	want := []string{
		"# source: xds",
		"# version: v7",
		"edge.path=/login.ip: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false",
		"edge.user: unit=HOUR requests_per_unit=10, shadow_mode: false, quota_mode: false",
	}
	for _, w := range want {
		if !strings.Contains(r.raw, w+"\n") {
			t.Errorf("/rlconfig lacks %q:\n%s", w, r.raw)
		}
	}
	if n := metricValue(t, s, "ratewarden_config_info", map[string]string{"source": "xds", "version": "v7"}); n != 1 {
		t.Errorf("ratewarden_config_info{xds,v7} = %v", n)
	}
	if err := s.SetConfig(nil, "xds", "v8"); err == nil {
		t.Error("SetConfig(nil): no error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestCap)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Shutdown(ctx) }()
	<-done
	if code := s.Handler(); code == nil {
		t.Fatal("no handler")
	}
	rec := &statusRecorder{header: http.Header{}}
	hreq, _ := http.NewRequest(http.MethodGet, "/healthcheck", nil)
	s.Handler().ServeHTTP(rec, hreq)
	if rec.code != http.StatusInternalServerError {
		t.Errorf("/healthcheck after shutdown: %d, want 500", rec.code)
	}
}

type statusRecorder struct {
	header http.Header
	code   int
}

func (r *statusRecorder) Header() http.Header { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return len(b), nil
}
func (r *statusRecorder) WriteHeader(c int) { r.code = c }

// TestNearLimit: allowed hits past NEAR_LIMIT_RATIO of a limit count in
// ratewarden_near_limit_total as envoyproxy/ratelimit's near_limit does.
func TestNearLimit(t *testing.T) {
	alignWindow(t, 60e9, 5e9)
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, jsonDomain)), server.WithNearLimitRatio(0.5))
	c := rlsClient(t, s)
	// user: 10 an hour; threshold floor(10 × 0.5) = 5: hits 6 to 10 are near.
	for i := 0; i < 12; i++ {
		shouldRL(t, c, "edge", 1, desc("user", "u1"))
	}
	got := metricValue(t, s, "ratewarden_near_limit_total", map[string]string{"api": "grpc", "domain": "edge", "policy": "user"})
	if got != 5 {
		t.Errorf("near-limit hits = %v, want 5 (hits 6..10; 11 and 12 denied)", got)
	}
	if _, err := server.New(memBackend(t), server.WithConfig(parseConfig(t, jsonDomain)), server.WithNearLimitRatio(1.5)); err == nil {
		t.Error("WithNearLimitRatio(1.5): no error")
	}
}

// metricValue is the value of the series of name with labels in the
// server's registry, -1 when there is none.
func metricValue(t *testing.T, s *server.Server, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
