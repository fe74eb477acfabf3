package server_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

func redisBackend(t *testing.T, addr string, opts ...backend.Option) *backend.Redis {
	t.Helper()
	b, err := backend.NewRedis("redis://"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

const sharedConfig = `
failure_policy: fail_closed
policies:
  api: 25/1h fixed_window
---
domain: shared
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 20
`

// TestTwoInstancesShareExactLimits runs two servers, each with its own
// Redis client, on one redis-server, and hammers both at once: together
// they admit exactly the limit, over HTTP and over gRPC.
func TestTwoInstancesShareExactLimits(t *testing.T) {
	rs := testredis.Start(t)
	var servers []*server.Server
	var clients []rlspb.RateLimitServiceClient
	for range 2 {
		// A generous deadline: this test is about exactness, not outages.
		s := start(t, redisBackend(t, rs.Addr, backend.WithTimeout(5*time.Second)), server.WithConfig(parseConfig(t, sharedConfig)))
		servers = append(servers, s)
		clients = append(clients, rlsClient(t, s))
	}
	alignWindow(t, time.Hour, time.Minute)

	var httpOK, grpcOK, degraded atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				s := servers[(g+i)%2]
				r := post(t, s, "/v1/check", `{"key":"alice","policy":"api"}`)
				if r.status != 200 {
					t.Errorf("http: %d %s", r.status, r.raw)
					return
				}
				if src := r.body["source"]; src != "store" && src != "cache" { // cache: redisstore's exact deny cache
					degraded.Add(1)
				}
				if r.body["allowed"] == true {
					httpOK.Add(1)
				}
			}
		})
		wg.Go(func() {
			for i := range 8 {
				resp := shouldRL(t, clients[(g+i)%2], "shared", 1, desc("user", "bob"))
				if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
					grpcOK.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if degraded.Load() != 0 {
		t.Fatalf("%d decisions did not come from Redis", degraded.Load())
	}
	if got := httpOK.Load(); got != 25 {
		t.Errorf("HTTP: %d of 80 allowed across 2 instances, want exactly 25", got)
	}
	if got := grpcOK.Load(); got != 20 {
		t.Errorf("gRPC: %d of 64 OK across 2 instances, want exactly 20", got)
	}

	// hits_addend counts on the shared counter too.
	resp := shouldRL(t, clients[0], "shared", 7, desc("user", "carol"))
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.Statuses[0].GetLimitRemaining() != 13 {
		t.Fatalf("hits 7: %v", resp)
	}
	resp = shouldRL(t, clients[1], "shared", 14, desc("user", "carol"))
	// Over the limit reports 0 remaining, as envoyproxy/ratelimit does;
	// nothing was consumed, as the next 13 hits show.
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].GetLimitRemaining() != 0 {
		t.Fatalf("hits 14 of 13 left: %v", resp)
	}
	resp = shouldRL(t, clients[1], "shared", 13, desc("user", "carol"))
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || resp.Statuses[0].GetLimitRemaining() != 0 {
		t.Fatalf("hits 13 of 13 left: %v", resp)
	}
}

const outageConfig = `
failure_policy: fail_closed
policies:
  open:
    limit: 100000/1h fixed_window
    failure_policy: fail_open
  closed:
    limit: 100000/1h fixed_window
  local:
    limit: 100000/1h fixed_window
    failure_policy: local_fallback
`

// TestRedisOutage stops Redis under load: every policy keeps answering
// per its failure mode, /readyz and the metrics say so, and when Redis is
// back the service recovers without a restart.
func TestRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: an outage of a running service; make test runs it")
	}
	rs := testredis.Start(t)
	// A deadline that a loaded machine (-race, parallel packages) meets:
	// the outage below is a dead Redis (connection refused), which fails
	// fast whatever the deadline.
	s := start(t, redisBackend(t, rs.Addr, backend.WithTimeout(time.Second), backend.WithProbeInterval(100*time.Millisecond), backend.WithLogger(testLogger(t))),
		server.WithConfig(parseConfig(t, outageConfig)))

	check := func(policy string) httpResp {
		return post(t, s, "/v1/check", fmt.Sprintf(`{"key":"k","policy":%q}`, policy))
	}
	// Warm up: the first call loads the script (EVALSHA, NOSCRIPT, EVAL)
	// and dials; a slow first call may be answered by the failure policy.
	// Wait until every policy is decided by Redis before the outage.
	for _, p := range []string{"open", "closed", "local"} {
		eventually(t, waitCap, p+" decided by Redis before the outage", func() bool {
			r := check(p)
			return r.status == 200 && r.body["source"] == "store" && r.body["allowed"] == true
		})
	}
	eventually(t, waitCap, "/readyz 200 before the outage", func() bool { return get(t, s, "/readyz").status == 200 })

	// Load: every answer must be a 200 decision, whatever Redis does.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered, failed atomic.Int64
	for _, p := range []string{"open", "closed", "local"} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := check(p); r.status == 200 {
					answered.Add(1)
				} else {
					failed.Add(1)
					t.Errorf("%s: %d %s", p, r.status, r.raw)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	rs.Kill()
	want := map[string]struct {
		source  string
		allowed bool
	}{"open": {"fail_open", true}, "closed": {"fail_closed", false}, "local": {"local_fallback", true}}
	for p, w := range want {
		eventually(t, waitCap, p+" degraded to "+w.source, func() bool {
			r := check(p)
			return r.status == 200 && r.body["source"] == w.source && r.body["allowed"] == w.allowed && r.body["degraded"] == true
		})
	}
	eventually(t, waitCap, "/readyz 503", func() bool { return get(t, s, "/readyz").status == 503 })
	for _, src := range []string{"fail_open", "fail_closed", "local_fallback"} {
		if got := metric(t, s, "ratewarden_degraded_decisions_total", `source="`+src+`"`); got == 0 {
			t.Errorf("no degraded decisions counted for %s", src)
		}
	}
	// Degraded answers start with the first failed call; the breaker opens
	// only after several, so wait for it.
	eventually(t, waitCap, "fail_closed breaker open or half-open", func() bool {
		return metric(t, s, "ratewarden_breaker_state", `failure_policy="fail_closed"`) != 0
	})

	rs.Restart(t)
	for _, p := range []string{"open", "closed", "local"} {
		eventually(t, waitCap, p+" back on Redis", func() bool {
			r := check(p)
			return r.status == 200 && r.body["source"] == "store" && r.body["allowed"] == true
		})
	}
	eventually(t, waitCap, "/readyz 200", func() bool { return get(t, s, "/readyz").status == 200 })
	if answered.Load() == 0 || failed.Load() != 0 {
		t.Errorf("under load: %d answered, %d failed", answered.Load(), failed.Load())
	}
	t.Logf("under load: %d decisions answered through the outage, %d failed", answered.Load(), failed.Load())
}
