package server_test

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/rls"
)

// peerServer serves testdata/every_feature.yaml from a redis-server of its
// own, with the given EnvoyCompat.
func peerServer(t *testing.T, c rls.EnvoyCompat) rlspb.RateLimitServiceClient {
	t.Helper()
	cfg, err := config.Load(filepath.Join("testdata", "every_feature.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rs := testredis.Start(t)
	b := redisBackend(t, rs.Addr, backend.WithTimeout(5*time.Second))
	return rlsClient(t, start(t, b, server.WithConfig(cfg), server.WithEnvoyCompat(c)))
}

// wantStatus checks one status: its code, the limit it names (rpu < 0:
// none), its remaining, and whether it has a duration_until_reset.
func wantStatus(t *testing.T, what string, st *rlspb.RateLimitResponse_DescriptorStatus, code rlspb.RateLimitResponse_Code, name string, rpu int64, remaining uint32, hasReset bool) {
	t.Helper()
	cl := st.GetCurrentLimit()
	switch {
	case st.GetCode() != code, st.GetLimitRemaining() != remaining, (st.GetDurationUntilReset() != nil) != hasReset:
	case rpu < 0 && cl != nil, rpu >= 0 && (cl == nil || int64(cl.GetRequestsPerUnit()) != rpu || cl.GetName() != name):
	default:
		return
	}
	t.Errorf("%s: status %v; want %v, limit %q %d, remaining %d, reset %v", what, st, code, name, rpu, remaining, hasReset)
}

// TestPeerAnswers asks for every feature of testdata/every_feature.yaml
// and checks the answers envoyproxy/ratelimit gives (read from its
// source: src/config/config_impl.go, src/limiter/base_limiter.go,
// src/service/ratelimit.go): statuses, codes, remaining and reset.
func TestPeerAnswers(t *testing.T) {
	c := peerServer(t, rls.EnvoyCompat{})
	alignWindow(t, time.Minute, 20*time.Second)

	t.Run("nested", func(t *testing.T) {
		wantStatus(t, "tenant", shouldRL(t, c, "shop", 1, desc("tenant", "a")).Statuses[0], ok, "", 4, 3, true)
		wantStatus(t, "tenant.route", shouldRL(t, c, "shop", 1, desc("tenant", "a", "route", "x")).Statuses[0], ok, "", 3, 2, true)
		wantStatus(t, "tenant.route=checkout", shouldRL(t, c, "shop", 1, desc("tenant", "a", "route", "checkout")).Statuses[0], ok, "", 2, 1, true)
		wantStatus(t, "deeper than the config", shouldRL(t, c, "shop", 1, desc("tenant", "a", "route", "x", "extra", "1")).Statuses[0], ok, "", -1, 0, false)
	})
	t.Run("wildcards in config order", func(t *testing.T) {
		// book-* is listed before book-rare-*: it wins, as the peer's
		// first-listed match does (not the longest prefix).
		wantStatus(t, "book-rare-1", shouldRL(t, c, "shop", 1, desc("sku", "book-rare-1")).Statuses[0], ok, "books", 5, 4, true)
		wantStatus(t, "b*k literal", shouldRL(t, c, "shop", 1, desc("sku", "b*k")).Statuses[0], ok, "literal_star", 2, 1, true)
		wantStatus(t, "bak is not b*k", shouldRL(t, c, "shop", 1, desc("sku", "bak")).Statuses[0], ok, "", -1, 0, false)
		wantStatus(t, "x*y*z literal", shouldRL(t, c, "shop", 1, desc("sku", "x*y*z")).Statuses[0], ok, "literal_stars", 2, 1, true)
		wantStatus(t, "xAyBz is not x*y*z", shouldRL(t, c, "shop", 1, desc("sku", "xAyBz")).Statuses[0], ok, "", -1, 0, false)
		wantStatus(t, "x*y* is the prefix x*y", shouldRL(t, c, "shop", 1, desc("sku", "x*yQ")).Statuses[0], ok, "star_prefix", 2, 1, true)
	})
	t.Run("share_threshold", func(t *testing.T) {
		shouldRL(t, c, "shop", 2, desc("file", "docs/a"))
		wantStatus(t, "docs/b shares docs/a's counter", shouldRL(t, c, "shop", 1, desc("file", "docs/b")).Statuses[0], ok, "docs", 3, 0, true)
		r := shouldRL(t, c, "shop", 1, desc("file", "docs/c"))
		wantCodes(t, "docs/c", r, over, over)
		shouldRL(t, c, "shop", 3, desc("file", "media/a"))
		wantStatus(t, "media/b has its own", shouldRL(t, c, "shop", 1, desc("file", "media/b")).Statuses[0], ok, "media", 3, 2, true)
	})
	t.Run("unlimited", func(t *testing.T) {
		wantStatus(t, "staff", shouldRL(t, c, "shop", 1000, desc("staff", "s")).Statuses[0], ok, "", -1, math.MaxUint32, false)
	})
	t.Run("shadow_mode is OK", func(t *testing.T) {
		shouldRL(t, c, "shop", 1, desc("trial", "t"))
		r := shouldRL(t, c, "shop", 1, desc("trial", "t"))
		wantCodes(t, "trial over", r, ok, ok)
		wantStatus(t, "trial over", r.Statuses[0], ok, "", 1, 0, true)
	})
	t.Run("quota_mode is OK without a reset", func(t *testing.T) {
		shouldRL(t, c, "shop", 1, desc("export", "e"))
		r := shouldRL(t, c, "shop", 1, desc("export", "e"))
		wantCodes(t, "export over", r, ok, ok)
		wantStatus(t, "export over", r.Statuses[0], ok, "", 1, 0, false)
	})
	t.Run("shadow_mode wins over quota_mode", func(t *testing.T) {
		shouldRL(t, c, "shop", 1, desc("both", "b"))
		wantStatus(t, "both over", shouldRL(t, c, "shop", 1, desc("both", "b")).Statuses[0], ok, "", 1, 0, true)
	})
	t.Run("replaces", func(t *testing.T) {
		r := shouldRL(t, c, "shop", 1, desc("user", "u"), desc("plan", "gold"))
		wantStatus(t, "replaced per_user", r.Statuses[0], ok, "", -1, 0, false)
		wantStatus(t, "gold", r.Statuses[1], ok, "gold", 10, 9, true)
		r = shouldRL(t, c, "shop", 1, desc("vip", "v"), desc("promo", "p"))
		wantStatus(t, "replaced unlimited", r.Statuses[0], ok, "", -1, math.MaxUint32, false)
		wantStatus(t, "promo", r.Statuses[1], ok, "promo", 3, 2, true)
	})
	t.Run("requests_per_unit 0 has a reset", func(t *testing.T) {
		r := shouldRL(t, c, "shop", 1, desc("banned", "b"))
		wantCodes(t, "banned", r, over, over)
		wantStatus(t, "banned", r.Statuses[0], over, "", 0, 0, true)
		if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d != time.Second {
			t.Errorf("banned (unit second) duration_until_reset %v, want 1s (the peer's window end)", d)
		}
	})
	t.Run("hits_addend above the limit", func(t *testing.T) {
		r := shouldRL(t, c, "shop", 5, desc("tenant", "big"))
		wantStatus(t, "5 of 4", r.Statuses[0], over, "", 4, 0, true)
		if d := r.Statuses[0].GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("5 of 4: duration_until_reset %v, want the minute window's end", d)
		}
		// Deliberately better than the peer: the rejected hits took nothing.
		wantStatus(t, "then 4 of 4", shouldRL(t, c, "shop", 4, desc("tenant", "big")).Statuses[0], ok, "", 4, 0, true)
	})
	t.Run("every unit", func(t *testing.T) {
		units := []struct {
			v    string
			unit rlspb.RateLimitResponse_RateLimit_Unit
			max  time.Duration
		}{
			{"s", rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
			{"m", rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
			{"h", rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
			{"d", rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
			{"w", rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
			{"mo", rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
			{"y", rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
		}
		for _, u := range units {
			st := shouldRL(t, c, "shop", 1, desc("unit", u.v)).Statuses[0]
			d := st.GetDurationUntilReset().AsDuration()
			if st.GetCurrentLimit().GetUnit() != u.unit || d < time.Second || d > u.max || d%time.Second != 0 {
				t.Errorf("unit %s: %v; want unit %v and a whole-second reset in [1s, %v]", u.v, st, u.unit, u.max)
			}
		}
	})
	t.Run("override with unit WEEK", func(t *testing.T) {
		o := desc("sku", "weekly")
		o.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit(rlspb.RateLimitResponse_RateLimit_WEEK)}
		r := shouldRL(t, c, "shop", 1, o)
		if st := r.Statuses[0]; st.GetCode() != ok || st.GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_WEEK {
			t.Errorf("weekly: %v", st)
		}
		wantCodes(t, "weekly 2nd", shouldRL(t, c, "shop", 1, o), over, over)
	})
	t.Run("one descriptor twice counts in order", func(t *testing.T) {
		r := shouldRL(t, c, "shop", 1, desc("tenant", "twice"), desc("tenant", "twice"))
		wantStatus(t, "first", r.Statuses[0], ok, "", 4, 3, true)
		wantStatus(t, "second", r.Statuses[1], ok, "", 4, 2, true)
	})
	t.Run("per-descriptor hits_addend 0 only looks", func(t *testing.T) {
		d := desc("tenant", "look")
		d.HitsAddend = wrapperspb.UInt64(0)
		wantStatus(t, "look", shouldRL(t, c, "shop", 1, d).Statuses[0], ok, "", 4, 4, true)
	})
}

func headerMap(r *rlspb.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, kv := range r.GetResponseHeadersToAdd() {
		h[kv.GetKey()] = kv.GetValue()
	}
	return h
}

// TestPeerHeaders: with rls.HeadersEnvoy the answer carries the peer's
// three headers for one descriptor: the last one over its limit, else the
// one with the fewest remaining; shadow and zero limits included.
func TestPeerHeaders(t *testing.T) {
	c := peerServer(t, rls.EnvoyCompat{Headers: rls.HeadersEnvoy})
	alignWindow(t, time.Minute, 20*time.Second)
	want := func(what string, r *rlspb.RateLimitResponse, limit, remaining string, maxReset int) {
		t.Helper()
		h := headerMap(r)
		reset, err := strconv.Atoi(h["RateLimit-Reset"])
		if len(h) != 3 || h["RateLimit-Limit"] != limit || h["RateLimit-Remaining"] != remaining || err != nil || reset < 1 || reset > maxReset {
			t.Errorf("%s: headers %v; want limit %s, remaining %s, reset in [1, %d]", what, h, limit, remaining, maxReset)
		}
	}
	want("one", shouldRL(t, c, "shop", 1, desc("tenant", "h")), "4", "3", 60)
	want("fewest remaining", shouldRL(t, c, "shop", 1, desc("tenant", "h2"), desc("sku", "b*k"), desc("tenant", "h3")), "2", "1", 60)
	want("over wins", shouldRL(t, c, "shop", 1, desc("banned", "x"), desc("tenant", "h4")), "0", "0", 1)
	shouldRL(t, c, "shop", 1, desc("trial", "h"))
	want("shadow", shouldRL(t, c, "shop", 1, desc("trial", "h"), desc("tenant", "h5")), "1", "0", 60)
	if h := headerMap(shouldRL(t, c, "shop", 1, desc("staff", "x"))); len(h) != 0 {
		t.Errorf("unlimited: headers %v, want none", h)
	}

	named := peerServer(t, rls.EnvoyCompat{Headers: rls.HeadersEnvoy, LimitHeader: "X-L", RemainingHeader: "X-R", ResetHeader: "X-T"})
	if h := headerMap(shouldRL(t, named, "shop", 1, desc("tenant", "n"))); len(h) != 3 || h["X-L"] != "4" || h["X-R"] != "3" || h["X-T"] == "" {
		t.Errorf("named headers %v", h)
	}
	none := peerServer(t, rls.EnvoyCompat{Headers: rls.HeadersNone})
	if h := headerMap(shouldRL(t, none, "shop", 1, desc("banned", "n"))); len(h) != 0 {
		t.Errorf("rls.HeadersNone: headers %v", h)
	}
}

// TestRatewardenHeadersForShadowAndZero: ratewarden's headers cover a
// requests_per_unit 0 limit, and a shadow limit when no enforced one
// applies.
func TestRatewardenHeadersForShadowAndZero(t *testing.T) {
	c := peerServer(t, rls.EnvoyCompat{})
	alignWindow(t, time.Minute, 20*time.Second)
	h := headerMap(shouldRL(t, c, "shop", 1, desc("banned", "z")))
	if h["x-ratelimit-limit"] != "0" || h["x-ratelimit-remaining"] != "0" || h["retry-after"] != "1" {
		t.Errorf("zero limit: headers %v", h)
	}
	shouldRL(t, c, "shop", 1, desc("trial", "z"))
	h = headerMap(shouldRL(t, c, "shop", 1, desc("trial", "z")))
	if h["x-ratelimit-limit"] != "1" || h["x-ratelimit-remaining"] != "0" || h["retry-after"] != "" {
		t.Errorf("shadow only: headers %v, want its limit and no retry-after", h)
	}
}

// TestPeerGlobalModes: SHADOW_MODE, QUOTA_MODE and
// RESPONSE_DYNAMIC_METADATA.
func TestPeerGlobalModes(t *testing.T) {
	shadow := peerServer(t, rls.EnvoyCompat{ShadowMode: true})
	r := shouldRL(t, shadow, "shop", 1, desc("banned", "g"))
	wantCodes(t, "global shadow", r, ok, over)
	if h := headerMap(r); h["retry-after"] != "" || h["x-ratelimit-limit"] != "0" {
		t.Errorf("global shadow: headers %v, want the limit and no retry-after (the request passes)", h)
	}

	quota := peerServer(t, rls.EnvoyCompat{QuotaMode: true, DynamicMetadata: true})
	d := desc("banned", "g")
	d.HitsAddend = wrapperspb.UInt64(2)
	r = shouldRL(t, quota, "shop", 3, desc("tenant", "g"), d)
	wantCodes(t, "global quota", r, ok, ok, ok)
	wantStatus(t, "global quota banned", r.Statuses[1], ok, "", 0, 0, false)
	md := r.GetDynamicMetadata().AsMap()
	if md["domain"] != "shop" || md["hitsAddend"] != 3.0 || md["quotaModeEnabled"] != false {
		t.Errorf("dynamic metadata %v", md)
	}
	if v, _ := md["quotaModeViolations"].([]any); len(v) != 1 || v[0] != 1.0 {
		t.Errorf("quotaModeViolations %v, want [1]", md["quotaModeViolations"])
	}
	descs, _ := md["descriptors"].([]any)
	if len(descs) != 2 {
		t.Fatalf("descriptors %v", md["descriptors"])
	}
	if d1, _ := descs[1].(map[string]any); d1["hitsAddend"] != 2.0 || len(d1["entries"].([]any)) != 1 || d1["entries"].([]any)[0] != "banned=g" {
		t.Errorf("descriptors[1] %v", d1)
	}
	// QUOTA_MODE leaves a shadow limit as shadow: OK with a reset.
	shouldRL(t, quota, "shop", 1, desc("trial", "g"))
	wantStatus(t, "global quota, shadow limit", shouldRL(t, quota, "shop", 1, desc("trial", "g")).Statuses[0], ok, "", 1, 0, true)
	r = shouldRL(t, quota, "shop", 1, desc("export", "g"))
	if r.GetDynamicMetadata().AsMap()["quotaModeEnabled"] != true {
		t.Errorf("a quota_mode limit: quotaModeEnabled %v", r.GetDynamicMetadata().AsMap())
	}
}

// TestMergeDomainsServer: with MergeDomains the server loads two files of
// one domain as one; without it, it refuses them.
func TestMergeDomainsServer(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, "b.yaml"), "domain: m\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	if _, err := server.New(memBackend(t), server.WithConfigPaths(dir), server.WithLogger(testLogger(t))); err == nil {
		t.Fatal("two documents of domain m loaded without MergeDomains")
	}
	c := rlsClient(t, start(t, memBackend(t), server.WithConfigPaths(dir), server.WithEnvoyCompat(rls.EnvoyCompat{MergeDomains: true})))
	r := shouldRL(t, c, "m", 1, desc("a", "x"), desc("b", "y"))
	wantStatus(t, "a", r.Statuses[0], ok, "", 1, 0, true)
	wantStatus(t, "b", r.Statuses[1], ok, "", 2, 1, true)
}
