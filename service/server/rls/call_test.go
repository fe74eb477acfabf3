package rls

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// TestDraftHeadersAgainstReference: ratewarden's headers, rendered with
// the plan's renderers (a node's own, or the domain's cache of several:
// missed, then hit), are those of a renderer made for the request from
// its limits, for requests mixing counted, shadow, quota, zero, replaced,
// repeated and overridden descriptors, over and under their limits.
func TestDraftHeadersAgainstReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "every_feature.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("every_feature.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestService(t, cfg)
	d := func(kv ...string) *rlcommon.RateLimitDescriptor {
		x := &rlcommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			x.Entries = append(x.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return x
	}
	override := d("tenant", "ov")
	override.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR}
	many := d("tenant", "hits")
	many.HitsAddend = wrapperspb.UInt64(3)
	requests := [][]*rlcommon.RateLimitDescriptor{
		{d("tenant", "a")},
		{d("tenant", "a"), d("tenant", "a", "route", "x")},
		{d("tenant", "a"), d("trial", "t"), d("banned", "b")},
		{d("trial", "t"), d("both", "b")},
		{d("export", "e"), d("trial", "t")},
		{d("user", "u"), d("plan", "gold"), d("sku", "book-1")},
		{d("vip", "v"), d("promo", "p"), d("file", "docs/a")},
		{d("tenant", "twice"), d("tenant", "twice"), d("sku", "b*k")},
		{override, d("tenant", "a")},
		{many, d("unit", "s"), d("unit", "y"), d("staff", "s")},
		{d("nomatch", "x"), d("tenant", "b")},
	}
	ctx := context.Background()
	for round := range 6 { // the limits run out along the way
		for i, ds := range requests {
			req := &rlspb.RateLimitRequest{Domain: "shop", Descriptors: ds}
			c := newRLSCall()
			hits, err := c.validate(req, g.maxKey)
			if err != nil {
				t.Fatal(err)
			}
			sn := g.plan.Load()
			dp := sn.domains["shop"]
			if err := g.resolve(req, c, hits, dp, sn); err != nil {
				t.Fatal(err)
			}
			if err := g.decideAll(ctx, c); err != nil {
				t.Fatal(err)
			}
			for _, over := range []bool{false, true} {
				now := time.Now()
				want := headerStrings(referenceHeaders(c.evals, over, now))
				for try := range 2 { // a cache miss, then a hit
					if got := headerStrings(c.draftHeaders(dp, over, now)); !sameHeaders(got, want) {
						t.Errorf("round %d, request %d, over %v, try %d:\n got %v\nwant %v", round, i, over, try, got, want)
					}
				}
			}
			c.free()
		}
	}
}

// testMaxKey is the server's default key cap.
const testMaxKey = 1 << 10

// newTestService is a Service on cfg, as the server makes it with its
// defaults, deciding in memory; its backend closes when t ends.
func newTestService(t *testing.T, cfg *config.Config) *Service {
	t.Helper()
	m, err := backend.NewMemory(testMaxKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	metrics := telemetry.New(prometheus.NewRegistry(), m.Breakers)
	g := New(Deps{Log: slog.New(slog.DiscardHandler), Metrics: metrics, Limiters: decide.NewLimiters(m, metrics, nil),
		MaxKey: testMaxKey, NearRatio: 0.8, DefaultFailure: fallback.LocalFallback})
	g.SetConfig(cfg)
	return g
}

func headerStrings(hs []*corepb.HeaderValue) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.GetKey()+": "+h.GetValue())
	}
	return out
}

// sameHeaders compares headers, X-RateLimit-Reset (a Unix time the
// renderer takes from the clock) to within a second.
func sameHeaders(a, b []string) bool {
	return slices.EqualFunc(a, b, func(x, y string) bool {
		const reset = "x-ratelimit-reset: "
		if strings.HasPrefix(x, reset) && strings.HasPrefix(y, reset) {
			u, err1 := strconv.ParseInt(x[len(reset):], 10, 64)
			v, err2 := strconv.ParseInt(y[len(reset):], 10, 64)
			return err1 == nil && err2 == nil && u-v <= 1 && v-u <= 1
		}
		return x == y
	})
}

// referenceHeaders renders ratewarden's headers from evals the plain
// way: a renderer made for the request's limits, enforced ones first,
// shadow ones when there are none, each limit and key once.
func referenceHeaders(evals []evalDesc, over bool, now time.Time) []*corepb.HeaderValue {
	var hdr, shadowHdr ratewarden.Decision
	var policies, shadowPolicies []httplimit.Policy
	seen := map[*ratewarden.Result]bool{}
	for i := range evals {
		e := &evals[i]
		var res ratewarden.Result
		switch e.kind {
		case kindCounted:
			if seen[&e.unit.res[e.idx]] {
				continue
			}
			seen[&e.unit.res[e.idx]] = true
			res = e.unit.res[e.idx]
		case kindZero:
			reset := windowReset(e.period, now)
			res = ratewarden.Result{Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Period: e.period}, RetryAfter: reset, ResetAfter: reset}
		default:
			continue
		}
		p := httplimit.Policy{Name: e.label, Limit: res.Limit}
		if e.shadow {
			shadowHdr.Results, shadowPolicies = append(shadowHdr.Results, res), append(shadowPolicies, p)
		} else {
			hdr.Results, policies = append(hdr.Results, res), append(policies, p)
		}
	}
	if len(hdr.Results) == 0 {
		hdr, policies = shadowHdr, shadowPolicies
		for i := range hdr.Results {
			hdr.Results[i].Allowed = true
			hdr.Results[i].RetryAfter = 0
		}
	}
	hdr.Allowed = !over
	var out []*corepb.HeaderValue
	for _, f := range httplimit.NewRenderer(decide.DraftSet, policies...).Append(nil, hdr, over) {
		out = append(out, &corepb.HeaderValue{Key: strings.ToLower(f.Name), Value: f.Value})
	}
	return out
}
