package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server"
)

const httpPolicies = `
policies:
  api:
    limit: 3/1h fixed_window
  tb: 2/1h burst 4 token_bucket
  shadowed:
    limit: 1/1h fixed_window
    shadow_mode: true
`

func TestHTTPCheckPeekReset(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithInlineLimits(config.InlineLimits{Enabled: true}))
	alignWindow(t, time.Hour, time.Minute)
	for i := range 3 {
		r := post(t, s, "/v1/check", `{"key":"alice","policy":"api"}`)
		if r.status != 200 || r.body["allowed"] != true || r.body["remaining"] != float64(2-i) {
			t.Fatalf("check %d: %d %s", i, r.status, r.raw)
		}
	}
	r := post(t, s, "/v1/check", `{"key":"alice","policy":"api"}`)
	if r.status != 200 || r.body["allowed"] != false || r.body["over_limit"] != true || r.body["source"] != "store" {
		t.Fatalf("4th check: %d %s", r.status, r.raw)
	}
	if r.body["retry_after_ms"].(float64) <= 0 {
		t.Errorf("denied without retry_after_ms: %s", r.raw)
	}
	for h, want := range map[string]string{
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "0",
		"Ratelimit-Policy":      `"api";q=3;w=3600`,
	} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if r.header.Get("Retry-After") == "" || !strings.HasPrefix(r.header.Get("Ratelimit"), `"api";r=0;t=`) {
		t.Errorf("headers: %v", r.header)
	}
	// Another key and an inline limit with the same key are separate.
	if r := post(t, s, "/v1/check", `{"key":"bob","policy":"api"}`); r.body["allowed"] != true {
		t.Errorf("bob: %s", r.raw)
	}
	if r := post(t, s, "/v1/check", `{"key":"alice","limit":"3/1h fixed_window"}`); r.body["allowed"] != true {
		t.Errorf("inline alice: %s", r.raw)
	}
	// Peek does not consume.
	for range 3 {
		if r := post(t, s, "/v1/peek", `{"key":"carol","policy":"api"}`); r.body["allowed"] != true || r.body["remaining"] != float64(3) {
			t.Fatalf("peek: %s", r.raw)
		}
	}
	// Cost.
	if r := post(t, s, "/v1/check", `{"key":"dave","policy":"tb","cost":4}`); r.body["allowed"] != true || r.body["remaining"] != float64(0) {
		t.Fatalf("cost 4 of burst 4: %s", r.raw)
	}
	// Reset gives alice her allowance back.
	if r := post(t, s, "/v1/reset", `{"key":"alice","policy":"api"}`); r.status != 200 || r.body["reset"] != true {
		t.Fatalf("reset: %d %s", r.status, r.raw)
	}
	if r := post(t, s, "/v1/check", `{"key":"alice","policy":"api"}`); r.body["allowed"] != true || r.body["remaining"] != float64(2) {
		t.Fatalf("after reset: %s", r.raw)
	}
	// Shadow mode: over the limit is reported, the request allowed.
	post(t, s, "/v1/check", `{"key":"eve","policy":"shadowed"}`)
	r = post(t, s, "/v1/check", `{"key":"eve","policy":"shadowed"}`)
	if r.body["allowed"] != true || r.body["over_limit"] != true || r.body["shadow"] != true || r.header.Get("Retry-After") != "" {
		t.Fatalf("shadow: %s %v", r.raw, r.header)
	}
	if got := metric(t, s, "ratewarden_decisions_total", `policy="shadowed"`, `outcome="shadow_denied"`); got != 1 {
		t.Errorf("shadow_denied metric = %v, want 1", got)
	}
	if got := metric(t, s, "ratewarden_decisions_total", `policy="api"`, `outcome="denied"`); got != 1 {
		t.Errorf("denied metric = %v, want 1", got)
	}
	// Labels never carry caller keys.
	if m := get(t, s, "/metrics"); strings.Contains(m.raw, "alice") {
		t.Error("a caller key shows in /metrics")
	}
}

func TestHTTPBadInputConsumesNothing(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithMaxBodyBytes(1024), server.WithInlineLimits(config.InlineLimits{Enabled: true}))
	cases := []struct {
		name, path, body string
		status           int
		detail           string
	}{
		{"invalid JSON", "/v1/check", `{"key":"k","policy":"api"`, 400, "invalid JSON"},
		{"not JSON", "/v1/check", `key=k`, 400, "invalid JSON"},
		{"empty body", "/v1/check", ``, 400, "empty body"},
		{"unknown field", "/v1/check", `{"key":"k","policy":"api","costs":1}`, 400, `unknown field "costs"`},
		{"wrong type", "/v1/check", `{"key":"k","policy":"api","cost":"1"}`, 400, `field "cost": want a whole number`},
		{"trailing data", "/v1/check", `{"key":"k","policy":"api"} {}`, 400, "trailing data"},
		{"missing key", "/v1/check", `{"policy":"api"}`, 400, `field "key" is required`},
		{"no policy or limit", "/v1/check", `{"key":"k"}`, 400, `"policy"`},
		{"both policy and limit", "/v1/check", `{"key":"k","policy":"api","limit":"1/1s"}`, 400, "not both"},
		{"unknown policy", "/v1/check", `{"key":"k","policy":"nope"}`, 400, `unknown policy "nope"`},
		{"bad inline limit", "/v1/check", `{"key":"k","limit":"0/1s"}`, 400, "rate must be > 0"},
		{"negative cost", "/v1/check", `{"key":"k","policy":"api","cost":-1}`, 400, "cost must be >= 0, got -1"},
		{"cost over capacity", "/v1/check", `{"key":"k","policy":"api","cost":4}`, 400, "cost 4 exceeds the capacity 3"},
		{"negative cost peek", "/v1/peek", `{"key":"k","policy":"api","cost":-5}`, 400, "cost must be >= 0"},
		{"field name in upper case", "/v1/check", `{"KEY":"k","policy":"api"}`, 400, `unknown field "KEY"`},
		{"field name in title case", "/v1/check", `{"key":"k","policy":"api","Cost":3}`, 400, `unknown field "Cost" (field names are case-sensitive: "cost")`},
		{"field name case on reset", "/v1/reset", `{"key":"k","Policy":"api"}`, 400, `unknown field "Policy"`},
		{"reset unknown field", "/v1/reset", `{"key":"k","policy":"api","cost":1}`, 400, `unknown field "cost"`},
		{"huge body", "/v1/check", `{"key":"` + strings.Repeat("k", 2000) + `","policy":"api"}`, 413, "larger than 1024 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, s, c.path, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.raw)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			if d, _ := r.body["detail"].(string); !strings.Contains(d, c.detail) || r.body["status"] != float64(c.status) {
				t.Errorf("problem %s does not say %q", r.raw, c.detail)
			}
		})
	}
	if r := get(t, s, "/v1/check"); r.status != 405 {
		t.Errorf("GET /v1/check: %d", r.status)
	}
	// Nothing was consumed: the full allowance is left.
	if r := post(t, s, "/v1/peek", `{"key":"k","policy":"api","cost":3}`); r.body["allowed"] != true || r.body["remaining"] != float64(3) {
		t.Fatalf("after bad input: %s", r.raw)
	}
}

func TestHTTPToken(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, httpPolicies)), server.WithAPIToken("s3cret"))
	if r := post(t, s, "/v1/check", `{"key":"k","policy":"api"}`); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %s", r.status, r.raw)
	}
	if r := post(t, s, "/v1/check", `{"key":"k","policy":"api"}`, "Authorization", "Bearer wrong"); r.status != 401 {
		t.Fatalf("wrong token: %d", r.status)
	}
	if r := post(t, s, "/v1/check", `{"key":"k","policy":"api"}`, "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("right token: %d %s", r.status, r.raw)
	}
	// Probes and metrics stay open.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := get(t, s, p); r.status != 200 {
			t.Errorf("%s: %d", p, r.status)
		}
	}
}
