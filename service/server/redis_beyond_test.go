package server_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

const replicaPolicies = `
failure_policy: fail_closed
policies:
  jobs:
    max_in_flight: 4
    ttl: 1m
  tokens: 1000/1h fixed_window
`

// replicas starts n servers, each with its own Redis client, on one
// redis-server, with the given options.
func replicas(t *testing.T, rs *testredis.Server, n int, opts ...server.Option) []*server.Server {
	t.Helper()
	var out []*server.Server
	for range n {
		// A generous deadline: these tests are about exactness, not outages.
		o := append([]server.Option{server.WithConfig(parseConfig(t, replicaPolicies))}, opts...)
		out = append(out, start(t, redisBackend(t, rs.Addr, backend.WithTimeout(5*time.Second)), o...))
	}
	return out
}

// TestPermitsAcrossReplicas: two servers on one Redis hold one key's
// permits together: exactly max at once, and a permit acquired on one is
// released and extended on the other.
func TestPermitsAcrossReplicas(t *testing.T) {
	rs := testredis.Start(t)
	ss := replicas(t, rs, 2)

	// 16 acquisitions at once, 8 on each replica: exactly 4 acquired.
	var got []string
	var mu sync.Mutex
	var refused, degraded atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r := acquire(t, ss[i%2], "tenant", "jobs")
			if r.body["source"] != "store" {
				degraded.Add(1)
			}
			switch r.status {
			case 200:
				mu.Lock()
				got = append(got, r.body["permit"].(string))
				mu.Unlock()
			case 429:
				refused.Add(1)
			default:
				t.Errorf("acquire: %d %s", r.status, r.raw)
			}
		})
	}
	wg.Wait()
	if degraded.Load() != 0 {
		t.Fatalf("%d acquisitions were not decided by Redis", degraded.Load())
	}
	if len(got) != 4 || refused.Load() != 12 {
		t.Fatalf("16 acquisitions at once on 2 replicas: %d acquired, %d refused; want exactly 4 and 12", len(got), refused.Load())
	}
	// Each permit is released on the replica that did not grant it (the
	// grantor is unknown here: try both, the first release frees it).
	for i, p := range got {
		if r := post(t, ss[i%2], "/v1/extend", fmt.Sprintf(`{"permit":%q,"ttl_ms":30000}`, p)); r.status != 200 {
			t.Fatalf("extend on replica %d: %d %s", i%2, r.status, r.raw)
		}
	}
	r := post(t, ss[1], "/v1/release", fmt.Sprintf(`{"permit":%q}`, got[0]))
	if r.status != 200 || r.body["released"] != true {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if r := post(t, ss[0], "/v1/release", fmt.Sprintf(`{"permit":%q}`, got[0])); r.body["released"] != false {
		t.Fatalf("the same permit released again on the other replica: %s", r.raw)
	}
	permitOf(t, "the freed slot", acquire(t, ss[0], "tenant", "jobs"))
	isProblem(t, "full again", acquire(t, ss[1], "tenant", "jobs"), 429, "4 of 4")
}

// TestPermitsUnderLoadNeverExceedMax: callers on two replicas acquire,
// hold a few milliseconds and release, again and again; the number
// holding at once, counted by the test, never exceeds max.
func TestPermitsUnderLoadNeverExceedMax(t *testing.T) {
	rs := testredis.Start(t)
	ss := replicas(t, rs, 2)
	var inFlight, peak, done atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 15 {
				s := ss[(g+i)%2]
				r := acquire(t, s, "load", "jobs")
				if r.status == 429 {
					time.Sleep(time.Millisecond)
					continue
				}
				if r.status != 200 {
					t.Errorf("acquire: %d %s", r.status, r.raw)
					return
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(3 * time.Millisecond)
				inFlight.Add(-1) // before the release: the slot is the store's again once released
				rel := post(t, ss[(g+i+1)%2], "/v1/release", fmt.Sprintf(`{"permit":%q}`, r.body["permit"]))
				if rel.status != 200 || rel.body["released"] != true {
					t.Errorf("release: %d %s", rel.status, rel.raw)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if peak.Load() > 4 {
		t.Fatalf("%d held at once, max 4", peak.Load())
	}
	if done.Load() == 0 {
		t.Fatal("no permit was acquired and released: the test checked nothing")
	}
	t.Logf("%d permits acquired and released; at most %d held at once (max 4)", done.Load(), peak.Load())
}

// TestSettleAcrossReplicas: a reservation made on one replica settles on
// another sharing the secret, exactly, once; a replica with another
// secret refuses it.
func TestSettleAcrossReplicas(t *testing.T) {
	rs := testredis.Start(t)
	secret := server.WithReservationSecrets([]byte("a secret the replicas share, 32+"))
	ss := replicas(t, rs, 2, secret)
	stranger := replicas(t, rs, 1)[0] // a secret of its own
	alignWindow(t, time.Hour, time.Minute)

	r, tok := reserve(t, ss[0], `{"key":"k","policy":"tokens","estimate":100}`)
	if r.body["source"] != "store" || r.body["remaining"] != float64(900) {
		t.Fatalf("reserve: %s", r.raw)
	}
	isProblem(t, "settle on a replica without the secret", settle(t, stranger, tok, 30), 400, "signed with a secret this replica does not hold")
	wantSettled(t, "settle 30 of 100 on the other replica", settle(t, ss[1], tok, 30), -70, -70)
	for i, s := range ss {
		if got := remaining(t, s, "k", "tokens"); got != 970 {
			t.Fatalf("replica %d sees %v remaining, want exactly 970", i, got)
		}
	}
	isProblem(t, "settle again on the first replica", settle(t, ss[0], tok, 0), 409, "settled before")

	// Racing settlements: 10 reservations of 50, each settled at 20 four
	// times at once over both replicas; one settlement each takes effect.
	var toks []string
	for range 10 {
		_, tk := reserve(t, ss[0], `{"key":"race","policy":"tokens","estimate":50}`)
		toks = append(toks, tk)
	}
	var ok, conflict atomic.Int64
	var wg sync.WaitGroup
	for i, tk := range toks {
		for j := range 4 {
			wg.Go(func() {
				r := settle(t, ss[(i+j)%2], tk, 20)
				switch r.status {
				case 200:
					ok.Add(1)
				case 409:
					conflict.Add(1)
				default:
					t.Errorf("settle: %d %s", r.status, r.raw)
				}
			})
		}
	}
	wg.Wait()
	if ok.Load() != 10 || conflict.Load() != 30 {
		t.Fatalf("40 racing settlements of 10 reservations: %d took effect, %d refused; want 10 and 30", ok.Load(), conflict.Load())
	}
	if got := remaining(t, ss[1], "race", "tokens"); got != 1000-10*20 {
		t.Fatalf("after 10 reservations of 50 settled at 20: %v remaining, want exactly 800", got)
	}
}

const outagePolicies = `
policies:
  open-jobs: {max_in_flight: 2, ttl: 1m, failure_policy: fail_open}
  closed-jobs: {max_in_flight: 2, ttl: 1m, failure_policy: fail_closed}
  local-jobs: {max_in_flight: 2, ttl: 1m, failure_policy: local_fallback}
  open: {limit: 100/1h fixed_window, failure_policy: fail_open}
  closed: {limit: 100/1h fixed_window, failure_policy: fail_closed}
  local: {limit: 100/1h fixed_window, failure_policy: local_fallback}
`

// TestPermitsAndSettlementsInAnOutage: with Redis killed, acquisitions
// and reservations are answered by each policy's failure policy, and what
// only Redis can answer (a permit it holds, whether a reservation counted
// there was settled under fail_closed) is a 503 that names nothing of
// the server.
func TestPermitsAndSettlementsInAnOutage(t *testing.T) {
	rs := testredis.Start(t)
	s := start(t, redisBackend(t, rs.Addr, backend.WithTimeout(time.Second), backend.WithProbeInterval(100*time.Millisecond), backend.WithLogger(testLogger(t))),
		server.WithConfig(parseConfig(t, outagePolicies)))
	// Before: a permit and a reservation held in Redis, once Redis
	// decides (the first calls load scripts and dial).
	var held, counted string
	eventually(t, waitCap, "a permit from Redis", func() bool {
		r := acquire(t, s, "k", "closed-jobs")
		held, _ = r.body["permit"].(string)
		return r.status == 200 && r.body["source"] == "store"
	})
	eventually(t, waitCap, "a reservation counted in Redis", func() bool {
		r := post(t, s, "/v1/reserve", `{"key":"k","policy":"closed","estimate":10}`)
		counted, _ = r.body["reservation"].(string)
		return r.status == 200 && r.body["source"] == "store" && r.body["allowed"] == true
	})

	rs.Kill()
	// fail_open: a permit held nowhere; release and extend have nothing
	// to do and ask nobody.
	var open httpResp
	eventually(t, waitCap, "fail_open permits", func() bool {
		open = acquire(t, s, "k", "open-jobs")
		return open.status == 200 && open.body["source"] == "fail_open" && open.body["degraded"] == true
	})
	if r := post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q}`, open.body["permit"])); r.status != 200 {
		t.Errorf("extend a fail_open permit: %d %s", r.status, r.raw)
	}
	if r := post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, open.body["permit"])); r.status != 200 || r.body["released"] != false {
		t.Errorf("release a fail_open permit: %d %s", r.status, r.raw)
	}
	// fail_closed: 429, degraded.
	r := acquire(t, s, "k", "closed-jobs")
	isProblem(t, "fail_closed acquire", r, 429, "fails closed")
	if r.body["source"] != "fail_closed" || r.body["degraded"] != true || r.header.Get("Retry-After") == "" {
		t.Errorf("fail_closed acquire: %s", r.raw)
	}
	// local_fallback: this replica's share, released locally.
	r = acquire(t, s, "k", "local-jobs")
	if r.status != 200 || r.body["source"] != "local_fallback" {
		t.Fatalf("local_fallback acquire: %d %s", r.status, r.raw)
	}
	if rel := post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, r.body["permit"])); rel.status != 200 || rel.body["released"] != true {
		t.Errorf("release a local permit in the outage: %d %s", rel.status, rel.raw)
	}

	// What only Redis holds: 503.
	var bodies []string
	for _, path := range []string{"/v1/release", "/v1/extend"} {
		r := post(t, s, path, fmt.Sprintf(`{"permit":%q}`, held))
		isProblem(t, path+" of a permit Redis holds", r, 503, "retry later")
		bodies = append(bodies, r.raw)
	}
	r = settle(t, s, counted, 5)
	isProblem(t, "settle a fail_closed reservation counted in Redis", r, 503, "retry later")
	bodies = append(bodies, r.raw)
	for _, b := range bodies {
		for _, f := range []string{rs.Addr, "127.0.0.1", "dial", "refused", "redis", "server:", "ratewarden:"} {
			if strings.Contains(b, f) {
				t.Errorf("an error body says %q: %s", f, b)
			}
		}
	}

	// Reservations in the outage: fail_open counts nowhere, so it
	// settles to nothing; local_fallback on this replica's share.
	rv, tok := reserve(t, s, `{"key":"k","policy":"open","estimate":10}`)
	if rv.body["source"] != "fail_open" || rv.body["allowed"] != true {
		t.Fatalf("fail_open reserve: %s", rv.raw)
	}
	wantSettled(t, "a fail_open reservation", settle(t, s, tok, 4), -6, 0)
	rv, tok = reserve(t, s, `{"key":"k","policy":"local","estimate":10}`)
	if rv.body["source"] != "local_fallback" || rv.body["allowed"] != true {
		t.Fatalf("local_fallback reserve: %s", rv.raw)
	}
	wantSettled(t, "a local_fallback reservation", settle(t, s, tok, 4), -6, -6)
	isProblem(t, "the local_fallback reservation again", settle(t, s, tok, 4), 409, "settled before")
	rv, _ = reserve(t, s, `{"key":"k","policy":"closed","estimate":10}`)
	if rv.body["source"] != "fail_closed" || rv.body["allowed"] != false {
		t.Fatalf("fail_closed reserve: %s", rv.raw)
	}
	for _, src := range []string{"fail_open", "fail_closed", "local_fallback"} {
		if got := metric(t, s, "ratewarden_degraded_decisions_total", `source="`+src+`"`); got == 0 {
			t.Errorf("no degraded decisions counted for %s", src)
		}
	}
	for _, op := range []string{"release", "extend"} {
		if got := metric(t, s, "ratewarden_store_errors_total", `op="`+op+`"`); got == 0 {
			t.Errorf("no %s store errors counted", op)
		}
	}
}
