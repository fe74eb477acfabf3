package server_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/service/demo/checkonly"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

const permitPolicies = `
policies:
  jobs:
    max_in_flight: 3
    ttl: 1h
  brief:
    max_in_flight: 1
    ttl: 200ms
  api: 100/1h fixed_window
`

// acquire posts /v1/acquire for key under policy.
func acquire(t *testing.T, s *server.Server, key, policy string) httpResp {
	t.Helper()
	return post(t, s, "/v1/acquire", fmt.Sprintf(`{"key":%q,"policy":%q}`, key, policy))
}

// permitOf is the permit of an acquisition that must have succeeded.
func permitOf(t *testing.T, what string, r httpResp) string {
	t.Helper()
	p, _ := r.body["permit"].(string)
	if r.status != 200 || r.body["acquired"] != true || p == "" {
		t.Fatalf("%s: want a permit, got %d %s", what, r.status, r.raw)
	}
	return p
}

func TestAcquireReleaseExtend(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, permitPolicies)))
	var permits []string
	for i := range 3 {
		r := acquire(t, s, "tenant-1", "jobs")
		permits = append(permits, permitOf(t, fmt.Sprintf("acquire %d", i), r))
		for k, want := range map[string]any{"held": float64(i + 1), "max": float64(3), "ttl_ms": float64(3600_000), "retry_after_ms": float64(0), "source": "store", "degraded": false, "key": "tenant-1", "policy": "jobs"} {
			if r.body[k] != want {
				t.Errorf("acquire %d: %s = %v, want %v", i, k, r.body[k], want)
			}
		}
	}
	// At max: 429, a problem with the acquisition's members, Retry-After.
	r := acquire(t, s, "tenant-1", "jobs")
	isProblem(t, "4th acquire", r, 429, "3 of 3 permits of this key are held")
	if r.body["acquired"] != false || r.body["held"] != float64(3) || r.body["max"] != float64(3) || r.body["permit"] != nil {
		t.Errorf("4th acquire: %s", r.raw)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || r.body["retry_after_ms"].(float64) <= 0 {
		t.Errorf("4th acquire: Retry-After %q, body %s", r.header.Get("Retry-After"), r.raw)
	}
	// Another key, and another policy, count apart.
	permitOf(t, "another key", acquire(t, s, "tenant-2", "jobs"))
	// Release frees one, once.
	rel := post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, permits[0]))
	if rel.status != 200 || rel.body["released"] != true || rel.body["key"] != "tenant-1" || rel.body["policy"] != "jobs" {
		t.Fatalf("release: %d %s", rel.status, rel.raw)
	}
	if rel := post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, permits[0])); rel.status != 200 || rel.body["released"] != false {
		t.Fatalf("second release: %d %s", rel.status, rel.raw)
	}
	permits[0] = permitOf(t, "acquire after a release", acquire(t, s, "tenant-1", "jobs"))
	isProblem(t, "at max again", acquire(t, s, "tenant-1", "jobs"), 429, "retry in")
	// Extend: by the policy's ttl, or less.
	if ext := post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q}`, permits[1])); ext.status != 200 || ext.body["extended"] != true || ext.body["ttl_ms"] != float64(3600_000) {
		t.Fatalf("extend: %d %s", ext.status, ext.raw)
	}
	if ext := post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q,"ttl_ms":60000}`, permits[1])); ext.status != 200 || ext.body["ttl_ms"] != float64(60000) {
		t.Fatalf("extend by 60 s: %d %s", ext.status, ext.raw)
	}
	// A released permit is lost: 410.
	isProblem(t, "extend a released permit", post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q,"ttl_ms":1000}`, func() string {
		post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, permits[2]))
		return permits[2]
	}())), 410, "acquire a new one")

	for _, c := range []struct{ labels []string }{
		{[]string{`policy="jobs"`, `outcome="allowed"`}},
		{[]string{`policy="jobs"`, `outcome="denied"`}},
	} {
		if got := metric(t, s, "ratewarden_decisions_total", c.labels...); got == 0 {
			t.Errorf("no decisions counted with %v", c.labels)
		}
	}
	want := map[string]float64{"released": 2, "not_held": 1, "extended": 2, "lost": 1}
	for result, n := range want {
		if got := metric(t, s, "ratewarden_permit_ends_total", `policy="jobs"`, `result="`+result+`"`); got != n {
			t.Errorf("ratewarden_permit_ends_total{result=%q} = %v, want %v", result, got, n)
		}
	}
	for _, op := range []string{"acquire", "release", "extend"} {
		if got := metric(t, s, "ratewarden_store_duration_seconds_count", `op="`+op+`"`); got == 0 {
			t.Errorf("no %s store calls timed", op)
		}
	}
	if m := get(t, s, "/metrics"); strings.Contains(m.raw, "tenant-1") {
		t.Error("a caller key shows in /metrics")
	}
	if dump := get(t, s, "/rlconfig"); !strings.Contains(dump.raw, "\npolicy jobs: max_in_flight 3, ttl 1h\n") || !strings.Contains(dump.raw, "\npolicy api: 100/1h fixed_window, shadow_mode: false\n") {
		t.Errorf("/rlconfig:\n%s", dump.raw)
	}
}

// TestPermitExpires: a permit not extended within its ttl is lost (410)
// and frees its slot; releasing it says it was not held.
func TestPermitExpires(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, permitPolicies)))
	before := time.Now() // the permit's 200 ms start no sooner
	p := permitOf(t, "acquire", acquire(t, s, "k", "brief"))
	// A slow machine may see the permit expire before the second try: a
	// 200 is wrong only sooner than its ttl (less 1 ms for the store's
	// clock) after the first was sent.
	r := acquire(t, s, "k", "brief")
	if took := time.Since(before); r.status != 200 || took < 199*time.Millisecond {
		isProblem(t, fmt.Sprintf("at max, %v after the first acquisition was sent", took.Round(time.Millisecond)), r, 429, "1 of 1")
	}
	eventually(t, waitCap, "the 200 ms permit to expire and a new one to be acquired", func() bool {
		return acquire(t, s, "k", "brief").status == 200
	})
	isProblem(t, "extend an expired permit", post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q}`, p)), 410, "expired")
	if rel := post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, p)); rel.status != 200 || rel.body["released"] != false {
		t.Fatalf("release an expired permit: %d %s", rel.status, rel.raw)
	}
}

func TestPermitBadInput(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, permitPolicies)), server.WithMaxKeyBytes(16))
	good := permitOf(t, "acquire", acquire(t, s, "k", "jobs"))
	other := permitOf(t, "acquire", acquire(t, s, "k", "jobs"))
	// A permit for the same key and policy with a guessed holder (the
	// holder is bytes 2 to 17 of the token): it matches nothing held.
	raw, err := base64.RawURLEncoding.DecodeString(good)
	if err != nil || len(raw) < 18 {
		t.Fatalf("permit %q: %v", good, err)
	}
	for i := 2; i < 18; i++ {
		raw[i] ^= 0x5a
	}
	forged := base64.RawURLEncoding.EncodeToString(raw)
	cases := []struct {
		path, body string
		status     int
		detail     string
	}{
		{"/v1/acquire", `{"policy":"jobs"}`, 400, `field "key" is required`},
		{"/v1/acquire", `{"key":"k"}`, 400, `field "policy"`},
		{"/v1/acquire", `{"key":"k","policy":"nope"}`, 400, `unknown policy "nope"`},
		{"/v1/acquire", `{"key":"k","policy":"api"}`, 400, `policy "api" is a rate limit: use /v1/check`},
		{"/v1/acquire", `{"key":"0123456789abcdefg","policy":"jobs"}`, 400, `the cap is 16 bytes`},
		{"/v1/acquire", `{"key":"k","policy":"jobs","max":100}`, 400, `unknown field "max"`},
		{"/v1/acquire", `{"key":"k","policy":"jobs","ttl":"1h"}`, 400, `unknown field "ttl"`},
		{"/v1/acquire", `{"key":5,"policy":"jobs"}`, 400, `field "key": want a string`},
		{"/v1/check", `{"key":"k","policy":"jobs"}`, 400, `policy "jobs" is a concurrency limit (max_in_flight): use /v1/acquire`},
		{"/v1/reserve", `{"key":"k","policy":"jobs","estimate":1}`, 400, `is a concurrency limit`},
		{"/v1/reset", `{"key":"k","policy":"jobs"}`, 400, `is a concurrency limit`},
		{"/v1/release", `{}`, 400, `field "permit" is required`},
		{"/v1/release", `{"permit":"not a permit"}`, 400, `field "permit": not a permit of this service`},
		{"/v1/release", `{"permit":"UAA"}`, 400, `not a permit of this service`},
		{"/v1/release", `{"permit":"` + forged + `"}`, -1, ``},
		{"/v1/extend", `{"permit":"` + forged + `"}`, 410, `acquire a new one`},
		{"/v1/extend", `{"permit":"` + other + `","ttl_ms":0}`, 400, `field "ttl_ms" must be between 1 and 3600000 (policy "jobs"'s ttl), got 0`},
		{"/v1/extend", `{"permit":"` + other + `","ttl_ms":3600001}`, 400, `field "ttl_ms" must be between 1 and 3600000`},
		{"/v1/extend", `{"permit":"` + other + `","ttl_ms":"1h"}`, 400, `field "ttl_ms": want a whole number`},
		{"/v1/extend", `{"ttl_ms":10}`, 400, `field "permit" is required`},
	}
	for _, c := range cases {
		r := post(t, s, c.path, c.body)
		if c.status == -1 {
			// Forged: a permit held by nobody; the real one stays held.
			if r.status != 200 || r.body["released"] != false {
				t.Fatalf("%s %s: %d %s", c.path, c.body, r.status, r.raw)
			}
			continue
		}
		isProblem(t, c.path+" "+c.body, r, c.status, c.detail)
	}
	// The permits are still held: none of the above touched them.
	for _, p := range []string{good, other} {
		if r := post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q,"ttl_ms":1000}`, p)); r.status != 200 {
			t.Fatalf("a good permit after bad input: %d %s", r.status, r.raw)
		}
	}
	if got := metric(t, s, "ratewarden_decisions_total", `policy="jobs"`); got != 2 {
		t.Errorf("%v decisions counted, want the 2 acquisitions: bad input is no decision", got)
	}
}

// TestPermitOfRemovedPolicy: after a reload drops its policy, a permit is
// refused by name; the slot ends with its ttl.
func TestPermitOfRemovedPolicy(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, permitPolicies)))
	p := permitOf(t, "acquire", acquire(t, s, "k", "jobs"))
	if err := s.SetConfig(parseConfig(t, "policies:\n  jobs: 10/1m\n"), "test", "2"); err != nil {
		t.Fatal(err)
	}
	isProblem(t, "release", post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, p)), 400, `its policy "jobs" is no longer a configured concurrency policy`)
}

// bareBackend hands out its backend's stores as stores that check and
// reset but answer Charge, Acquire, Release and Extend with
// errors.ErrUnsupported.
type bareBackend struct{ decide.Backend }

type bareStore struct {
	checkonly.Rest
	st ratewarden.Store
}

func (b bareStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	return b.st.Check(ctx, req, res)
}

func (b bareStore) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	return b.st.Reset(ctx, key, limits...)
}

func (b bareBackend) Store(fp fallback.Policy) (ratewarden.Store, error) {
	st, err := b.Backend.Store(fp)
	if err != nil {
		return nil, err
	}
	return bareStore{st: st}, nil
}

// TestStoreWithoutPermitsOrSettlement: on a store that can neither hold
// permits nor settle costs (errors.ErrUnsupported), acquisitions,
// releases, extensions and settlements are 503s; checks still decide.
func TestStoreWithoutPermitsOrSettlement(t *testing.T) {
	policies := server.WithConfig(parseConfig(t, permitPolicies+"  tokens: 100/1h\n"))
	secret := server.WithReservationSecrets([]byte("a secret both servers hold, 32 b"))
	full := start(t, memBackend(t), policies, secret)
	bare := start(t, bareBackend{memBackend(t)}, policies, secret)

	isProblem(t, "acquire", acquire(t, bare, "k", "jobs"), 503, "could not decide")
	p := permitOf(t, "acquire elsewhere", acquire(t, full, "k", "jobs"))
	isProblem(t, "release", post(t, bare, "/v1/release", fmt.Sprintf(`{"permit":%q}`, p)), 503, "could not decide")
	isProblem(t, "extend", post(t, bare, "/v1/extend", fmt.Sprintf(`{"permit":%q}`, p)), 503, "could not decide")
	_, tok := reserve(t, full, `{"key":"k","policy":"tokens","estimate":5}`)
	isProblem(t, "settle", settle(t, bare, tok, 1), 503, "could not decide")
	if r := post(t, bare, "/v1/check", `{"key":"k","policy":"tokens"}`); r.status != 200 || r.body["allowed"] != true {
		t.Fatalf("check: %d %s", r.status, r.raw)
	}
	// Each call reached the store, which refused it: a store failure. A
	// settlement first takes its once-only marker (an Acquire), which the
	// store refuses, so no charge is made.
	for op, want := range map[string]float64{"check": 1, "acquire": 2, "release": 1, "extend": 1, "charge": 0} {
		if got := metric(t, bare, "ratewarden_store_duration_seconds_count", `op="`+op+`"`); got != want {
			t.Errorf("%v %s store calls timed, want %v", got, op, want)
		}
	}
	// Nothing changed where the permit and the reservation are held.
	if r := post(t, full, "/v1/release", fmt.Sprintf(`{"permit":%q}`, p)); r.status != 200 || r.body["released"] != true {
		t.Errorf("release where it was acquired: %d %s", r.status, r.raw)
	}
	wantSettled(t, "settle where it was reserved", settle(t, full, tok, 1), -4, -4)
}
