package peerdiff

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// loadConfig has one limit per caller key, high enough never to deny, so
// both services do the same work on every request.
const loadConfig = "domain: load\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"

// TestLoadRatio (set PEERDIFF_LOAD=1) puts both services under the same
// gRPC load, one after the other: 64 callers, each sending a bounded
// number of requests, first each on its own descriptor, then all on one
// hot descriptor; it logs each service's rate and the ratio. It asserts
// nothing about speed: the numbers are for docs/performance.md, from one
// run on one machine.
func TestLoadRatio(t *testing.T) {
	if os.Getenv("PEERDIFF_LOAD") == "" {
		t.Skip("set PEERDIFF_LOAD=1 to measure")
	}
	const callers, perCaller = 64, 300
	peerBin, ourBin := build(t, t.TempDir())
	rt := t.TempDir()
	cfgDir := filepath.Join(rt, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "load.yaml"), []byte(loadConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	peerRedis, ourRedis := testredis.Start(t), testredis.Start(t)
	pg, ph, pd := freeAddr(t), freeAddr(t), freeAddr(t)
	pc := exec.Command(peerBin)
	pc.Env = []string{"PATH=" + os.Getenv("PATH"), "USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + peerRedis.Addr, "RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT=" + port(pg), "PORT=" + port(ph), "DEBUG_PORT=" + port(pd)}
	og := freeAddr(t)
	oc := exec.Command(ourBin, "serve", "--config", cfgDir, "--redis", "redis://"+ourRedis.Addr,
		"--http-addr", freeAddr(t), "--grpc-addr", og, "--log-level", "warn", "--rls-headers", "none")
	oc.Env = []string{"PATH=" + os.Getenv("PATH")}
	services := []service{startProc(t, "envoyproxy-ratelimit", pc, pg), startProc(t, "ratewarden", oc, og)}
	for _, hot := range []bool{false, true} {
		var rates [2]float64
		for i, s := range services {
			start := time.Now()
			errs := run(s, callers, perCaller, hot, fmt.Sprintf("%v-%d", hot, i))
			el := time.Since(start)
			if errs > 0 {
				t.Errorf("%s: %d of %d requests failed", s.name, errs, callers*perCaller)
			}
			rates[i] = float64(callers*perCaller) / el.Seconds()
		}
		what := "64 callers, a descriptor each"
		if hot {
			what = "64 callers, one hot descriptor"
		}
		t.Logf("%s: envoyproxy/ratelimit %.0f req/s, ratewarden %.0f req/s, ratio %.2f", what, rates[0], rates[1], rates[1]/rates[0])
	}
}

// run sends callers × perCaller requests to s and returns how many failed.
func run(s service, callers, perCaller int, hot bool, tag string) int {
	var mu sync.Mutex
	errs := 0
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			user := tag + "-" + strconv.Itoa(c)
			if hot {
				user = tag + "-hot"
			}
			req := &rlspb.RateLimitRequest{Domain: "load", Descriptors: []*rlcommon.RateLimitDescriptor{d("user", user)}}
			for range perCaller {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := s.c.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}
