package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/service/config"
)

func TestConcurrencyPolicies(t *testing.T) {
	cfg, err := config.Parse("c.yaml", []byte(`
policies:
  jobs:
    max_in_flight: 10
    ttl: 30s
    failure_policy: fail_closed
  exports: {max_in_flight: 1, ttl: 1500ms, shadow_mode: false}
  api: 100/1m
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Concurrency{
		"jobs":    {MaxInFlight: 10, TTL: 30 * time.Second},
		"exports": {MaxInFlight: 1, TTL: 1500 * time.Millisecond},
	}
	for name, c := range want {
		p := cfg.Policies[name]
		if p == nil || p.Concurrency == nil {
			t.Fatalf("%s: %+v, want a concurrency policy", name, p)
		}
		if *p.Concurrency != c || p.Limit != (ratewarden.Limit{}) {
			t.Errorf("%s: concurrency %+v, limit %v; want %+v and no limit", name, *p.Concurrency, p.Limit, c)
		}
	}
	if got := cfg.Policies["jobs"].Failure; got != fallback.FailClosed {
		t.Errorf("jobs: failure %q", got)
	}
	for name, want := range map[string]string{"jobs": "max_in_flight 10, ttl 30s", "exports": "max_in_flight 1, ttl 1500ms"} {
		if got := cfg.Policies[name].Concurrency.String(); got != want {
			t.Errorf("%s: String() = %q, want %q", name, got, want)
		}
	}
	if got := (&config.Concurrency{MaxInFlight: 2, TTL: time.Hour}).String(); got != "max_in_flight 2, ttl 1h" {
		t.Errorf("String() = %q", got)
	}
	if p := cfg.Policies["api"]; p.Concurrency != nil || p.Limit != ratewarden.PerMinute(100) {
		t.Errorf("api: %+v", p)
	}
}

func TestPolicyFieldProblems(t *testing.T) {
	cases := map[string]string{
		"jobs: {max_in_flight: 10}":                              `c.yaml:2: policy "jobs": ttl is required with max_in_flight`,
		"jobs: {ttl: 30s}":                                       `c.yaml:2: policy "jobs": max_in_flight is required with ttl`,
		"jobs: {max_in_flight: 0, ttl: 30s}":                     `c.yaml:2: policy "jobs": max_in_flight must be between 1 and 1000000, got 0`,
		"jobs: {max_in_flight: 1000001, ttl: 30s}":               `max_in_flight must be between 1 and 1000000, got 1000001`,
		"jobs: {max_in_flight: ten, ttl: 30s}":                   `policy "jobs": max_in_flight must be a whole number, got "ten"`,
		"jobs: {max_in_flight: 10, ttl: 30}":                     `policy "jobs": ttl "30": want a count and a unit ms, s, m, h or d (e.g. 30s)`,
		"jobs: {max_in_flight: 10, ttl: 0s}":                     `policy "jobs": ttl "0s"`,
		"jobs: {max_in_flight: 10, ttl: 400d}":                   `policy "jobs": ttl "400d"`,
		"jobs: {max_in_flight: 10, ttl: 1m burst 2}":             `policy "jobs": ttl "1m burst 2"`,
		"jobs: {max_in_flight: 10, ttl: [1s]}":                   `policy "jobs": ttl must be a string, got a list`,
		"jobs: {max_in_flight: 10, ttl: 30s, limit: 5/1m}":       `policy "jobs": give either max_in_flight and ttl (a concurrency limit) or a rate limit`,
		"jobs: {max_in_flight: 10, ttl: 30s, rate: 5}":           `policy "jobs": give either max_in_flight and ttl`,
		"jobs: {max_in_flight: 10, ttl: 30s, shadow_mode: true}": `policy "jobs": shadow_mode applies only to rate limits`,
		// A rate policy's period is read by the same grammar: a whole
		// limit's options in it were once taken, and dropped, silently.
		"api: {rate: 5, period: 1m burst 3 token_bucket}": `policy "api": period "1m burst 3 token_bucket": want a count and a unit`,
	}
	for body, want := range cases {
		t.Run(body, func(t *testing.T) {
			_, err := config.Parse("c.yaml", []byte("policies:\n  "+body+"\n"))
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error\n%v\ndoes not contain\n%s", err, want)
			}
			if n := len(config.Problems(err)); n != 1 {
				t.Errorf("%d problems, want 1: %v", n, err)
			}
		})
	}
}
