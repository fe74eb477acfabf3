package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// replicas returns n Limiters, each on its own Redis client, on one fresh
// redis-server: n replicas of a service.
func replicas(t *testing.T, n int) []*ratewarden.Limiter {
	t.Helper()
	srv := testredis.Start(t)
	var out []*ratewarden.Limiter
	for range n {
		l, err := ratewarden.New(newRedisStore(t, srv.Addr))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// planHeader is the plan function of the tests: the X-Plan header.
func planHeader(r *http.Request) (string, error) {
	p := r.Header.Get("X-Plan")
	if p == "" {
		return "", fmt.Errorf("no X-Plan: %w", ratewarden.ErrInvalidKey)
	}
	return p, nil
}

var (
	freePlan = httplimit.Plan{Name: "free", Policies: []httplimit.Policy{{Name: "free", Limit: fixed(3, time.Hour)}}}
	proPlan  = httplimit.Plan{Name: "pro", Policies: []httplimit.Policy{{Name: "pro", Limit: fixed(7, time.Hour)}}}
)

// Two plans on one route, served by two replicas on one Redis: each
// client gets its plan's limit exactly, and the plans never share a
// counter although their limits have the same scope.
func TestLimitFuncPlansExactAcrossReplicas(t *testing.T) {
	lims := replicas(t, 2)
	var hs []http.Handler
	for _, l := range lims {
		m := mustNew(t, l, httplimit.WithLimitFunc(planHeader, freePlan, proPlan), httplimit.WithKey(httplimit.Header("X-User")))
		hs = append(hs, m.Handler(new(ok)))
	}
	counts := map[string]int{}
	for i := range 40 {
		for _, u := range []struct{ user, plan string }{{"ann", "free"}, {"bob", "pro"}} {
			w := get(hs[i%2], client, "/", func(r *http.Request) { r.Header.Set("X-User", u.user); r.Header.Set("X-Plan", u.plan) })
			if w.Code == http.StatusOK {
				counts[u.plan]++
			}
			if got := w.Header().Get("RateLimit-Policy"); !strings.HasPrefix(got, `"`+u.plan+`";`) {
				t.Fatalf("%s: RateLimit-Policy %q names another plan", u.plan, got)
			}
		}
	}
	if counts["free"] != 3 || counts["pro"] != 7 {
		t.Errorf("admitted %v; want free:3 pro:7", counts)
	}
	// The same user on the other plan starts afresh: the plans count apart.
	w := get(hs[0], client, "/", func(r *http.Request) { r.Header.Set("X-User", "ann"); r.Header.Set("X-Plan", "pro") })
	if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "6" {
		t.Errorf("ann on pro: %d, remaining %q; want 200 and 6", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// An unknown plan is the server's fault (503), no plan the client's (400).
	if w := get(hs[0], client, "/", func(r *http.Request) { r.Header.Set("X-User", "cy"); r.Header.Set("X-Plan", "gold") }); w.Code != http.StatusServiceUnavailable {
		t.Errorf("unknown plan: %d, want 503", w.Code)
	}
	if w := get(hs[0], client, "/", func(r *http.Request) { r.Header.Set("X-User", "cy") }); w.Code != http.StatusBadRequest {
		t.Errorf("no plan: %d, want 400", w.Code)
	}
}

func TestLimitFuncConfigErrors(t *testing.T) {
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  httplimit.Option
		want string
	}{
		{"nil func", httplimit.WithLimitFunc(nil, freePlan), "Rule.Plans and Rule.PlanFunc go together"},
		{"no plans", httplimit.WithLimitFunc(planHeader), "Rule.Plans and Rule.PlanFunc go together"},
		{"twice", httplimit.WithLimitFunc(planHeader, freePlan, freePlan), `plan "free" given twice`},
		{"unnamed", httplimit.WithLimitFunc(planHeader, httplimit.Plan{Policies: freePlan.Policies}), "Plans[0].Name must not be empty"},
		{"bar", httplimit.WithLimitFunc(planHeader, httplimit.Plan{Name: "a|b", Policies: freePlan.Policies}), "must not contain '|'"},
		{"empty", httplimit.WithLimitFunc(planHeader, httplimit.Plan{Name: "a"}), `plan "a": Plan.Policies must not be empty`},
		{"bad limit", httplimit.WithLimitFunc(planHeader, httplimit.Plan{Name: "a", Policies: []httplimit.Policy{{Limit: ratewarden.Limit{}}}}), `rule "default": plan "a": policy 0`},
		{"both", httplimit.WithRule(httplimit.Rule{Name: "r", Policies: freePlan.Policies, Plans: []httplimit.Plan{freePlan}, PlanFunc: planHeader}), "leave Rule.Policies empty"},
		{"with WithLimits", httplimit.WithLimits(ratewarden.PerMinute(1)), "given twice"},
	} {
		opts := []httplimit.Option{tc.opt}
		if tc.name == "with WithLimits" {
			opts = append(opts, httplimit.WithLimitFunc(planHeader, freePlan))
		}
		_, err := httplimit.New(l, opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !(errors.Is(err, ratewarden.ErrInvalidConfig) || errors.Is(err, ratewarden.ErrInvalidLimit)) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// Reset and Peek through the middleware, across two replicas on one
// Redis: what one replica counted, the other reads and clears.
func TestResetAndPeekAcrossReplicas(t *testing.T) {
	lims := replicas(t, 2)
	lim := fixed(5, time.Hour)
	var ms []*httplimit.Middleware
	for _, l := range lims {
		ms = append(ms, mustNew(t, l, httplimit.WithLimits(lim), httplimit.WithRule(httplimit.Rule{
			Name: "login", Match: func(r *http.Request) bool { return r.URL.Path == "/login" }, Policies: []httplimit.Policy{{Limit: fixed(2, time.Hour)}},
		})))
	}
	h0 := ms[0].Handler(new(ok))
	for range 5 {
		get(h0, client, "/", nil)
	}
	get(h0, client, "/login", nil)
	if w := get(h0, client, "/", nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("sixth request: %d", w.Code)
	}
	ctx := context.Background()
	req := func(path string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = client
		return r
	}
	info, err := ms[1].Peek(ctx, req("/"))
	if err != nil || info.Rule != "default" || info.Key != "default|ip:198.51.100.7" || info.Decision.Allowed || info.Decision.Results[0].Remaining != 0 {
		t.Fatalf("Peek on replica 1: %+v, %v; want the default rule used up", info, err)
	}
	infos, err := ms[1].PeekKey(ctx, "ip:198.51.100.7")
	if err != nil || len(infos) != 2 || infos[0].Rule != "login" || infos[0].Decision.Results[0].Remaining != 1 || infos[1].Decision.Results[0].Remaining != 0 {
		t.Fatalf("PeekKey: %+v, %v; want login with 1 left, default with 0", infos, err)
	}
	// Peek consumed nothing.
	if info, _ := ms[0].Peek(ctx, req("/login")); info.Decision.Results[0].Remaining != 1 {
		t.Errorf("Peek consumed: remaining %d", info.Decision.Results[0].Remaining)
	}
	// Reset through replica 1 clears the rule the request matches only.
	if err := ms[1].Reset(ctx, req("/")); err != nil {
		t.Fatal(err)
	}
	if w := get(h0, client, "/", nil); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("after Reset: %d, remaining %q; want 200 and 4", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	if info, _ := ms[0].Peek(ctx, req("/login")); info.Decision.Results[0].Remaining != 1 {
		t.Errorf("Reset of / touched /login: remaining %d", info.Decision.Results[0].Remaining)
	}
	// ResetKey clears every rule.
	if err := ms[1].ResetKey(ctx, "ip:198.51.100.7"); err != nil {
		t.Fatal(err)
	}
	infos, _ = ms[0].PeekKey(ctx, "ip:198.51.100.7")
	if infos[0].Decision.Results[0].Remaining != 2 || infos[1].Decision.Results[0].Remaining != 5 {
		t.Errorf("after ResetKey: %+v", infos)
	}
	// Not limited: nothing to do. Bad keys: errors.
	skip := mustNew(t, lims[0], httplimit.WithRule(httplimit.Rule{Name: "x", Match: func(*http.Request) bool { return false }, Policies: []httplimit.Policy{{Limit: lim}}}))
	if info, err := skip.Peek(ctx, req("/")); err != nil || info.Rule != "" {
		t.Errorf("unmatched Peek: %+v, %v", info, err)
	}
	if err := skip.Reset(ctx, req("/")); err != nil {
		t.Errorf("unmatched Reset: %v", err)
	}
	if err := ms[0].ResetKey(ctx, ""); !errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Errorf("ResetKey(\"\"): %v", err)
	}
	if _, err := ms[0].PeekKey(ctx, ""); !errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Errorf("PeekKey(\"\"): %v", err)
	}
}

// Reset and Peek of a rule with plans: Peek reads the request's plan,
// Reset clears every plan of the client.
func TestResetAndPeekPlans(t *testing.T) {
	lims := replicas(t, 2)
	var ms []*httplimit.Middleware
	for _, l := range lims {
		ms = append(ms, mustNew(t, l, httplimit.WithLimitFunc(planHeader, freePlan, proPlan), httplimit.WithKey(httplimit.Header("X-User"))))
	}
	setPlan := func(plan string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-User", "ann"); r.Header.Set("X-Plan", plan) }
	}
	h := ms[0].Handler(new(ok))
	get(h, client, "/", setPlan("free"))
	get(h, client, "/", setPlan("pro"))
	get(h, client, "/", setPlan("pro"))
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	setPlan("pro")(r)
	ctx := context.Background()
	info, err := ms[1].Peek(ctx, r)
	if err != nil || info.Plan != "pro" || info.Decision.Results[0].Remaining != 5 || !strings.HasPrefix(info.Key, "default|pro|hdr:X-User:") {
		t.Fatalf("Peek: %+v, %v; want the pro plan with 5 left", info, err)
	}
	if err := ms[1].Reset(ctx, r); err != nil {
		t.Fatal(err)
	}
	key, _ := ms[1].ClientKey(r)
	infos, err := ms[0].PeekKey(ctx, key)
	if err != nil || len(infos) != 2 || infos[0].Plan != "free" || infos[0].Decision.Results[0].Remaining != 3 || infos[1].Decision.Results[0].Remaining != 7 {
		t.Errorf("after Reset: %+v, %v; want both plans full", infos, err)
	}
}

// Check from a handler, keyed by the username in a form, across two
// replicas: the limit holds in total, and the responses carry the same
// headers and 429 as the middleware's.
func TestCheckAcrossReplicas(t *testing.T) {
	lims := replicas(t, 2)
	loginLimit := fixed(3, time.Hour)
	var hs []http.Handler
	for _, l := range lims {
		m := mustNew(t, l, httplimit.WithRule(httplimit.Rule{Name: "login-user", Policies: []httplimit.Policy{{Name: "login", Limit: loginLimit}}}))
		hs = append(hs, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !m.Check(w, r, "user:"+r.FormValue("user")) {
				return
			}
			_, _ = w.Write([]byte("welcome"))
		}))
	}
	// The middleware's answers on a twin rule, to compare with.
	twin := mustNew(t, lims[0], httplimit.WithRule(httplimit.Rule{Name: "twin", Policies: []httplimit.Policy{{Name: "login", Limit: loginLimit}}})).Handler(new(ok))
	var codes []int
	for i := range 6 {
		w := get(hs[i%2], fmt.Sprintf("192.0.2.%d:1000", i), "/login?user=ann", nil)
		tw := get(twin, client, "/", nil)
		codes = append(codes, w.Code)
		if w.Code != tw.Code {
			t.Errorf("request %d: Check %d, middleware %d", i, w.Code, tw.Code)
		}
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After", "Content-Type"} {
			if a, b := w.Header().Get(name), tw.Header().Get(name); a != b && name != "RateLimit" {
				t.Errorf("request %d: %s: Check %q, middleware %q", i, name, a, b)
			}
		}
		if w.Code == http.StatusTooManyRequests && w.Body.String() != tw.Body.String() {
			t.Errorf("request %d: body %q, middleware's %q", i, w.Body.String(), tw.Body.String())
		}
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429 429]" {
		t.Errorf("codes %v; want 3 admitted across both replicas, then 429", codes)
	}
	// An empty key is the client's fault.
	l := lims[0]
	m := mustNew(t, l, httplimit.WithRule(httplimit.Rule{Name: "empty", Policies: []httplimit.Policy{{Limit: loginLimit}}}))
	w := get(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.Check(w, r, "") {
			t.Error("Check with an empty key proceeded")
		}
	}), client, "/", nil)
	if w.Code != http.StatusBadRequest {
		t.Errorf("empty key: %d, want 400", w.Code)
	}
}

// TestSharedCountersWarning: two middlewares on one Limiter with the same
// rule name and a limit of the same scope count each request twice; New
// logs that once, with the fix. Distinct rule names, other scopes or other
// Limiters do not warn.
func TestSharedCountersWarning(t *testing.T) {
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	logger, buf := newLogger()
	a := mustNew(t, l, httplimit.WithLimits(fixed(5, time.Minute)), httplimit.WithLogger(logger))
	if buf.String() != "" {
		t.Fatalf("first middleware warned: %s", buf)
	}
	b := mustNew(t, l, httplimit.WithLimits(fixed(5, time.Minute)), httplimit.WithLogger(logger))
	h := a.Handler(b.Handler(new(ok)))
	for range 10 {
		get(h, client, "/", nil)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 || !strings.Contains(buf.String(), "counted twice") || !strings.Contains(buf.String(), "WithRule") || !strings.Contains(buf.String(), "rule=default") {
		t.Errorf("log %q: want one warning naming the rule and the fix", buf)
	}
	// Not shared: another rule name, another scope, another Limiter.
	quiet, buf2 := newLogger()
	mustNew(t, l, httplimit.WithRule(httplimit.Rule{Name: "other", Policies: []httplimit.Policy{{Limit: fixed(5, time.Minute)}}}), httplimit.WithLogger(quiet))
	mustNew(t, l, httplimit.WithLimits(fixed(5, time.Hour)), httplimit.WithLogger(quiet))
	l2, _ := ratewarden.New(mustMemstore(t))
	mustNew(t, l2, httplimit.WithLimits(fixed(5, time.Minute)), httplimit.WithLogger(quiet))
	if buf2.String() != "" {
		t.Errorf("unshared counters warned: %s", buf2)
	}
}

// A Verdict carries what Handler would write.
func TestDecideVerdict(t *testing.T) {
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Hour)), httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = client
	v := m.Decide(r)
	if !v.Limited || !v.Proceed || v.Rejected() || v.Err != nil || v.Info.Key != "default|ip:198.51.100.7" {
		t.Fatalf("first: %+v", v)
	}
	v = m.Decide(r)
	h := http.Header{}
	v.SetHeaders(h)
	if !v.Rejected() || v.Proceed || h.Get("Retry-After") == "" || h.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("second: %+v, headers %v", v, h)
	}
	fields := v.AppendFields(nil)
	if len(fields) != 6 || fields[5].Name != "Retry-After" {
		t.Errorf("fields %v", fields)
	}
	if p := httplimit.DeniedProblem(v.Info); p.Status != 429 || p.Type != httplimit.ProblemTypeQuotaExceeded {
		t.Errorf("problem %+v", p)
	}
	hr, _ := http.NewRequest(http.MethodGet, "/health", nil)
	if v := m.Decide(hr); v.Limited || !v.Proceed || v.AppendFields(nil) != nil {
		t.Errorf("skipped: %+v", v)
	}
	nr, _ := http.NewRequest(http.MethodGet, "/", nil)
	nr.RemoteAddr = "@"
	if v := m.Decide(nr); !v.Limited || v.Proceed || !errors.Is(v.Err, ratewarden.ErrInvalidKey) || httplimit.ErrorProblem(v.Err).Status != 400 {
		t.Errorf("no key: %+v", v)
	}
}
