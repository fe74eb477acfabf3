package server_test

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratewarden/ratewarden/service/server"
)

const metricsConfig = `
domain: m
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 2}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
`

// TestGRPCDecisionMetrics: every gRPC decision counts once in
// ratewarden_decisions_total under its domain, policy (the limit's name,
// else its path; "...(override)" for an override) and outcome, and a
// series that has not counted is not shown; the counts go on across a
// configuration put in force again, and series of HTTP policies stay
// apart.
func TestGRPCDecisionMetrics(t *testing.T) {
	cfg := parseConfig(t, metricsConfig)
	s := start(t, memBackend(t), server.WithConfig(cfg))
	c := rlsClient(t, s)
	alignWindow(t, time.Hour, time.Minute)
	decisions := func(policy, outcome string) float64 {
		return metricValue(t, s, "ratewarden_decisions_total", map[string]string{"api": "grpc", "domain": "m", "policy": policy, "outcome": outcome})
	}
	if got := decisions("per_user", "allowed"); got != -1 {
		t.Errorf("per_user allowed before any decision: %v, want no series", got)
	}
	for range 3 {
		shouldRL(t, c, "m", 1, desc("user", "a"))
	}
	shouldRL(t, c, "m", 1, desc("trial", "x"), desc("trial", "y"))
	shouldRL(t, c, "m", 1, desc("trial", "x"))
	shouldRL(t, c, "m", 1, desc("banned", "b"))
	o := desc("user", "o")
	o.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_HOUR}
	shouldRL(t, c, "m", 1, o)
	shouldRL(t, c, "m", 1, o)
	if err := s.SetConfig(parseConfig(t, metricsConfig), "test", "2"); err != nil {
		t.Fatal(err)
	}
	shouldRL(t, c, "m", 1, desc("user", "a"))
	for _, w := range []struct {
		policy, outcome string
		n               float64
	}{
		{"per_user", "allowed", 2}, {"per_user", "denied", 2},
		{"trial", "allowed", 2}, {"trial", "shadow_denied", 1},
		{"banned", "denied", 1},
		{"user(override)", "allowed", 1}, {"user(override)", "denied", 1},
	} {
		if got := decisions(w.policy, w.outcome); got != w.n {
			t.Errorf("%s %s: %v decisions, want %v", w.policy, w.outcome, got, w.n)
		}
	}
	if got := decisions("banned", "allowed"); got != -1 {
		t.Errorf("banned allowed: %v, want no series", got)
	}
}
