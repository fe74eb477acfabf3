package httplimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
)

const client = "198.51.100.7:4242"

func TestDraftHeadersOnePolicyPerLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 15*time.Second)
		m := mustNew(t, l, httplimit.WithLimits(fixed(3, time.Minute), fixed(100, 24*time.Hour)))
		h := m.Handler(new(ok))

		w := get(h, client, "/", nil)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d, want 200", w.Code)
		}
		wantPolicy := `"3/1m fixed_window";q=3;w=60, "100/1d fixed_window";q=100;w=86400`
		if got := w.Header().Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("RateLimit-Policy = %q, want %q", got, wantPolicy)
		}
		// 45 s left in the minute, 23h59m45s = 86385 s left in the day.
		wantRL := `"3/1m fixed_window";r=2;t=45, "100/1d fixed_window";r=99;t=86385`
		if got := w.Header().Get("RateLimit"); got != wantRL {
			t.Errorf("RateLimit = %q, want %q", got, wantRL)
		}
		// The binding policy of an allowed request is the one with the fewest
		// remaining.
		// X-RateLimit-Reset is a Unix time by default: the end of the minute.
		reset := strconv.FormatInt(epoch.Add(time.Minute).Unix(), 10)
		for name, want := range map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": reset} {
			if got := w.Header().Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		if got := w.Header().Get("Retry-After"); got != "" {
			t.Errorf("Retry-After on an allowed request: %q", got)
		}
	})
}

func TestNamedPoliciesAndQuoting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithPolicies(
			httplimit.Policy{Name: "default", Limit: fixed(100, time.Minute)},
			httplimit.Policy{Name: `we"ird\`, Limit: ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: 500 * time.Millisecond, Burst: 20}},
		))
		w := get(m.Handler(new(ok)), client, "/", nil)
		// A sub-second period is advertised as w=1: w is whole seconds, rounded up.
		wantPolicy := `"default";q=100;w=60, "we\"ird\\";q=20;w=1`
		if got := w.Header().Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("RateLimit-Policy = %q, want %q", got, wantPolicy)
		}
		got := w.Header().Get("RateLimit")
		if !strings.HasPrefix(got, `"default";r=99;t=60, "we\"ird\\";r=19;t=`) {
			t.Errorf("RateLimit = %q", got)
		}
	})
}

func TestHeaderSelection(t *testing.T) {
	lim := fixed(5, time.Minute)
	cases := []struct {
		name    string
		set     httplimit.HeaderSet
		present []string
		absent  []string
	}{
		{"draft only", httplimit.DraftHeaders, []string{"RateLimit", "RateLimit-Policy"}, []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}},
		{"x only", httplimit.XRateLimitHeaders, []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}, []string{"RateLimit", "RateLimit-Policy"}},
		{"none", 0, nil, []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, _ := newLimiter(t, 0)
				h := mustNew(t, l, httplimit.WithLimits(lim), httplimit.WithHeaders(tc.set)).Handler(new(ok))
				w := get(h, client, "/", nil)
				for _, n := range tc.present {
					if w.Header().Get(n) == "" {
						t.Errorf("%s missing", n)
					}
				}
				for _, n := range tc.absent {
					if v := w.Header().Get(n); v != "" {
						t.Errorf("%s = %q, want absent", n, v)
					}
				}
				// Retry-After is sent on a rejection whatever the set.
				for range 5 {
					get(h, client, "/", nil)
				}
				if w := get(h, client, "/", nil); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "60" {
					t.Errorf("rejection: status %d, Retry-After %q; want 429, 60", w.Code, w.Header().Get("Retry-After"))
				}
			})
		})
	}
}

// TestXRateLimitResetUnix: the Unix form (the default; the deprecated
// XRateLimitResetUnix bit changes nothing) and the delta form of
// XRateLimitResetDelta.
func TestXRateLimitResetUnix(t *testing.T) {
	for _, set := range []httplimit.HeaderSet{httplimit.XRateLimitHeaders, httplimit.XRateLimitHeaders | httplimit.XRateLimitResetUnix} {
		t.Run(fmt.Sprintf("%#x", set), func(t *testing.T) { testXRateLimitResetUnix(t, set) })
	}
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 20*time.Second)
		h := mustNew(t, l, httplimit.WithLimits(fixed(5, time.Minute)),
			httplimit.WithHeaders(httplimit.XRateLimitHeaders|httplimit.XRateLimitResetDelta)).Handler(new(ok))
		if got := get(h, client, "/", nil).Header().Get("X-RateLimit-Reset"); got != "40" {
			t.Errorf("XRateLimitResetDelta: X-RateLimit-Reset = %q, want 40", got)
		}
	})
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.New(l, httplimit.WithLimits(fixed(5, time.Minute)),
		httplimit.WithHeaders(httplimit.XRateLimitHeaders|httplimit.XRateLimitResetUnix|httplimit.XRateLimitResetDelta)); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithHeaders") {
		t.Errorf("Unix and Delta together: %v, want an ErrInvalidConfig naming WithHeaders", err)
	}
}

func testXRateLimitResetUnix(t *testing.T, set httplimit.HeaderSet) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 20*time.Second)
		h := mustNew(t, l, httplimit.WithLimits(fixed(5, time.Minute)),
			httplimit.WithHeaders(set)).Handler(new(ok))
		w := get(h, client, "/", nil)
		// The window ends 40 s after the store's now; the Unix form adds
		// those 40 s to this server's clock (here both the bubble's).
		got, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := epoch.Add(time.Minute).Unix(); got != want {
			t.Errorf("X-RateLimit-Reset = %d, want %d, the end of the minute", got, want)
		}
	})
}

func TestRetryAfterRoundsUp(t *testing.T) {
	cases := []struct {
		at   time.Duration // offset into the minute of the denied request
		want string
	}{
		{29*time.Second + 800*time.Millisecond, "31"}, // 30.2 s left
		{30 * time.Second, "30"},                      // exactly 30 s left
		{59*time.Second + 600*time.Millisecond, "1"},  // 0.4 s left
		{59*time.Second + 999*time.Millisecond, "1"},  // 1 ms left
		{0, "60"},
	}
	for _, tc := range cases {
		t.Run(tc.at.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, _ := newLimiter(t, tc.at)
				h := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute))).Handler(new(ok))
				if w := get(h, client, "/", nil); w.Code != http.StatusOK {
					t.Fatalf("first request: %d", w.Code)
				}
				w := get(h, client, "/", nil)
				if w.Code != http.StatusTooManyRequests {
					t.Fatalf("second request: %d, want 429", w.Code)
				}
				if got := w.Header().Get("Retry-After"); got != tc.want {
					t.Errorf("Retry-After = %q, want %q", got, tc.want)
				}
			})
		})
	}
}

func TestRejectionProblemBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 30*time.Second)
		var infos []httplimit.Info
		next := new(ok)
		h := mustNew(t, l,
			httplimit.WithPolicies(httplimit.Policy{Name: "per-minute", Limit: fixed(2, time.Minute)}, httplimit.Policy{Name: "per-day", Limit: fixed(1000, 24*time.Hour)}),
			httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) { infos = append(infos, i) }),
		).Handler(next)
		get(h, client, "/", nil)
		get(h, client, "/", nil)
		w := get(h, client, "/", nil)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", w.Code)
		}
		if next.calls() != 2 {
			t.Errorf("next handler called %d times, want 2", next.calls())
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type = %q", ct)
		}
		var p map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("body %q: %v", w.Body.String(), err)
		}
		want := map[string]any{
			// The quota-exceeded problem type, draft section 5.1.
			"type":        "https://iana.org/assignments/http-problem-types#quota-exceeded",
			"title":       "Request cannot be satisfied as assigned quota has been exceeded",
			"status":      float64(429),
			"detail":      `Rate limit "per-minute" exceeded; retry in 30 s.`,
			"retry_after": float64(30),
			// Only the policy that denied: the day had room.
			"violated-policies": []any{"per-minute"},
		}
		for k, v := range want {
			if fmt.Sprint(p[k]) != fmt.Sprint(v) {
				t.Errorf("body[%q] = %v, want %v", k, p[k], v)
			}
		}
		if len(p) != len(want) {
			t.Errorf("body has members %v, want exactly %v", p, want)
		}
		if got := w.Header().Get("Retry-After"); got != "30" {
			t.Errorf("Retry-After = %q, want 30", got)
		}
		// A denied multi-limit check consumes from no limit: the day still has
		// 998. On a rejection no t exceeds Retry-After (draft section 6): the
		// day's 998 are not usable within 30 s either.
		if got := w.Header().Get("RateLimit"); got != `"per-minute";r=0;t=30, "per-day";r=998;t=30` {
			t.Errorf("RateLimit = %q", got)
		}
		if len(infos) != 1 || infos[0].Rule != "default" || infos[0].Key != "default|ip:198.51.100.7" || infos[0].Shadow || infos[0].Decision.Allowed {
			t.Errorf("OnLimit infos = %+v", infos)
		}
	})
}

func TestCustomDeniedHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		h := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute)),
			httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, info httplimit.Info) {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("slow down, " + info.Policies[0].Name))
			})).Handler(new(ok))
		get(h, client, "/", nil)
		w := get(h, client, "/", nil)
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != "slow down, 1/1m fixed_window" {
			t.Errorf("got %d %q", w.Code, w.Body.String())
		}
		if w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") == "" {
			t.Errorf("headers not set before the custom handler: %v", w.Header())
		}
	})
}

func TestShadowModeNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		log, logBuf := newLogger()
		var shadowed int
		next := new(ok)
		h := mustNew(t, l, httplimit.WithLimits(fixed(2, time.Minute)), httplimit.WithShadow(true), httplimit.WithLogger(log),
			httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) {
				if !i.Shadow || i.Decision.Allowed {
					t.Errorf("OnLimit in shadow mode: %+v", i)
				}
				shadowed++
			})).Handler(next)
		for i := range 5 {
			w := get(h, client, "/", nil)
			if w.Code != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200 in shadow mode", i, w.Code)
			}
			wantR := strconv.Itoa(max(1-i, 0))
			if got := w.Header().Get("X-RateLimit-Remaining"); got != wantR {
				t.Errorf("request %d: X-RateLimit-Remaining = %q, want %q", i, got, wantR)
			}
			if got := w.Header().Get("Retry-After"); got != "" {
				t.Errorf("request %d: Retry-After %q in shadow mode", i, got)
			}
		}
		if next.calls() != 5 || shadowed != 3 {
			t.Errorf("next called %d times (want 5), OnLimit %d (want 3)", next.calls(), shadowed)
		}
		// Three over-limit requests within a second: one log line (at most one
		// a second, so a flood cannot flood the log), counting the first.
		if n := strings.Count(logBuf.String(), "shadow mode"); n != 1 || !strings.Contains(logBuf.String(), "requests=1") {
			t.Errorf("%d shadow log lines, want 1 with requests=1:\n%s", n, logBuf.String())
		}
		if !strings.Contains(logBuf.String(), `policy="2/1m fixed_window"`) {
			t.Errorf("log does not name the policy:\n%s", logBuf.String())
		}
	})
}

func TestSkipIsNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		next := new(ok)
		h := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute)),
			httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" })).Handler(next)
		for range 10 {
			w := get(h, client, "/healthz", nil)
			if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
				t.Fatalf("skipped request: %d, headers %v", w.Code, w.Header())
			}
		}
		if w := get(h, client, "/api", nil); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("first counted request: %d %v", w.Code, w.Header())
		}
		if w := get(h, client, "/api", nil); w.Code != http.StatusTooManyRequests {
			t.Fatalf("second counted request: %d, want 429", w.Code)
		}
		if next.calls() != 11 {
			t.Errorf("next called %d times, want 11", next.calls())
		}
	})
}

func TestPerRouteRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		var keys []string
		_, err := httplimit.New(l, httplimit.WithRule(httplimit.Rule{Name: "public", Match: func(*http.Request) bool { return true }}))
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "Rule.Policies") {
			t.Fatalf("rule without policies: %v", err)
		}

		m := mustNew(t, l,
			httplimit.WithRule(httplimit.Rule{
				Name:     "upload",
				Match:    func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/upload") },
				Policies: []httplimit.Policy{{Name: "uploads", Limit: fixed(1, time.Minute)}},
			}),
			httplimit.WithRule(httplimit.Rule{
				Name:     "static",
				Match:    func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/static") },
				Policies: []httplimit.Policy{{Name: "static", Limit: fixed(3, time.Minute)}},
			}),
			httplimit.WithLimits(fixed(2, time.Minute)),
			httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) { keys = append(keys, i.Key) }),
		)
		hh := m.Handler(new(ok))
		codes := func(path string, n int) string {
			var s []string
			for range n {
				s = append(s, strconv.Itoa(get(hh, client, path, nil).Code))
			}
			return strings.Join(s, ",")
		}
		// Each rule has its own counter for the same client, even with the
		// same algorithm and period.
		if got := codes("/upload/a", 2); got != "200,429" {
			t.Errorf("upload: %s", got)
		}
		if got := codes("/static/x", 4); got != "200,200,200,429" {
			t.Errorf("static: %s", got)
		}
		if got := codes("/other", 3); got != "200,200,429" {
			t.Errorf("default: %s", got)
		}
		if w := get(hh, client, "/upload/b", nil); w.Header().Get("RateLimit-Policy") != `"uploads";q=1;w=60` {
			t.Errorf("upload policy header %q", w.Header().Get("RateLimit-Policy"))
		}
		want := "upload|ip:198.51.100.7 static|ip:198.51.100.7 default|ip:198.51.100.7 upload|ip:198.51.100.7"
		if got := strings.Join(keys, " "); got != want {
			t.Errorf("keys %q, want %q", got, want)
		}

		// Without a default rule, unmatched requests are not limited.
		m2 := mustNew(t, l, httplimit.WithRule(httplimit.Rule{
			Name:     "only",
			Match:    func(r *http.Request) bool { return r.Method == http.MethodPost },
			Policies: []httplimit.Policy{{Limit: fixed(1, time.Minute)}},
		}))
		for range 3 {
			if w := get(m2.Handler(new(ok)), client, "/", nil); w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
				t.Fatalf("unmatched request: %d %v", w.Code, w.Header())
			}
		}
	})
}

func TestCostFunction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		cost := func(r *http.Request) (int64, error) {
			n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			if err != nil {
				return 0, errors.New("bad n")
			}
			return n, nil
		}
		h := mustNew(t, l, httplimit.WithLimits(fixed(10, time.Minute)), httplimit.WithCost(cost)).Handler(new(ok))
		steps := []struct {
			n      string
			status int
			remain string
		}{
			{"4", 200, "6"},
			{"6", 200, "0"},
			{"1", 429, "0"},
			{"0", 200, "0"},   // cost 0 consumes nothing and passes
			{"11", 400, ""},   // more than the limit could ever admit
			{"-1", 400, ""},   // negative
			{"oops", 400, ""}, // the cost function failed
		}
		for _, s := range steps {
			w := get(h, client, "/?n="+s.n, nil)
			if w.Code != s.status || w.Header().Get("X-RateLimit-Remaining") != s.remain {
				t.Errorf("n=%s: status %d remaining %q, want %d %q", s.n, w.Code, w.Header().Get("X-RateLimit-Remaining"), s.status, s.remain)
			}
			if s.status == 400 && (strings.Contains(w.Body.String(), "bad n") || strings.Contains(w.Body.String(), "capacity")) {
				t.Errorf("n=%s: internal error text leaked: %s", s.n, w.Body.String())
			}
		}
	})
}

func TestKeyErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		next := new(ok)
		h := mustNew(t, l, httplimit.WithLimits(fixed(10, time.Minute)), httplimit.WithKey(httplimit.Header("X-API-Key"))).Handler(next)
		w := get(h, client, "/", nil)
		if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("missing API key: %d %v", w.Code, w.Header())
		}
		if strings.Contains(w.Body.String(), "X-Api-Key") || strings.Contains(w.Body.String(), "ratewarden") {
			t.Errorf("error text leaked: %s", w.Body.String())
		}
		// A key function failing for a reason of its own is a 503, with a fixed text.
		h = mustNew(t, l, httplimit.WithLimits(fixed(10, time.Minute)),
			httplimit.WithKey(func(*http.Request) (string, error) { return "", errors.New("db down: secret dsn") })).Handler(next)
		w = get(h, client, "/", nil)
		if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "secret") {
			t.Errorf("failing key function: %d %s", w.Code, w.Body.String())
		}
		// An empty key is an invalid key.
		h = mustNew(t, l, httplimit.WithLimits(fixed(10, time.Minute)), httplimit.WithKey(httplimit.Static(""))).Handler(next)
		if w := get(h, client, "/", nil); w.Code != http.StatusBadRequest {
			t.Errorf("empty key: %d", w.Code)
		}
		if next.calls() != 0 {
			t.Errorf("next called %d times", next.calls())
		}
	})
}

// A closed memstore fails every check with ErrStoreUnavailable: a real
// store error, with no failure policy in between.
func TestStoreErrorFailsOpenByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		_ = st.Close()
		log, logBuf := newLogger()
		next := new(ok)
		h := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute)), httplimit.WithLogger(log)).Handler(next)
		for i := range 3 {
			w := get(h, client, "/", nil)
			if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
				t.Fatalf("request %d: %d %v, want 200 without rate limit headers", i, w.Code, w.Header())
			}
		}
		if next.calls() != 3 {
			t.Errorf("next called %d times", next.calls())
		}
		// One line for the burst: the log is limited to one line a second.
		if n := strings.Count(logBuf.String(), "store failed"); n != 1 {
			t.Errorf("%d log lines, want 1:\n%s", n, logBuf.String())
		}
		if !strings.Contains(logBuf.String(), "fail open") || !strings.Contains(logBuf.String(), "memstore: store is closed") {
			t.Errorf("log line lacks the action or the cause:\n%s", logBuf.String())
		}
	})
}

func TestStoreErrorFailClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		_ = st.Close()
		log, _ := newLogger()
		next := new(ok)
		h := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Minute)), httplimit.WithLogger(log), httplimit.WithFailClosed(true)).Handler(next)
		w := get(h, client, "/", nil)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("status %d %v, want 503 problem", w.Code, w.Header())
		}
		if strings.Contains(w.Body.String(), "memstore") || strings.Contains(w.Body.String(), "closed") {
			t.Errorf("internal error leaked to the client: %s", w.Body.String())
		}
		if next.calls() != 0 {
			t.Errorf("next called %d times", next.calls())
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	good := httplimit.WithLimits(fixed(1, time.Minute))
	cases := []struct {
		name   string
		l      *ratewarden.Limiter
		opts   []httplimit.Option
		target error
		field  string
	}{
		{"nil limiter", nil, []httplimit.Option{good}, ratewarden.ErrInvalidConfig, "limiter"},
		{"no limits", l, nil, ratewarden.ErrInvalidConfig, "no limits"},
		{"nil option", l, []httplimit.Option{good, nil}, ratewarden.ErrInvalidConfig, "option 1"},
		{"bad limit", l, []httplimit.Option{httplimit.WithLimits(ratewarden.Limit{Period: time.Minute})}, ratewarden.ErrInvalidLimit, "rate"},
		{"same scope", l, []httplimit.Option{httplimit.WithLimits(fixed(1, time.Minute), fixed(5, time.Minute))}, ratewarden.ErrInvalidLimit, "scope"},
		{"limits twice", l, []httplimit.Option{good, good}, ratewarden.ErrInvalidConfig, "twice"},
		{"rule no name", l, []httplimit.Option{httplimit.WithRule(httplimit.Rule{Policies: []httplimit.Policy{{Limit: fixed(1, time.Minute)}}})}, ratewarden.ErrInvalidConfig, "Rule.Name"},
		{"rule pipe", l, []httplimit.Option{httplimit.WithRule(httplimit.Rule{Name: "a|b", Policies: []httplimit.Policy{{Limit: fixed(1, time.Minute)}}})}, ratewarden.ErrInvalidConfig, "Rule.Name"},
		{"rule twice", l, []httplimit.Option{httplimit.WithRule(httplimit.Rule{Name: "default", Policies: []httplimit.Policy{{Limit: fixed(1, time.Minute)}}}), good}, ratewarden.ErrInvalidConfig, "twice"},
		{"policy name", l, []httplimit.Option{httplimit.WithPolicies(httplimit.Policy{Name: "é", Limit: fixed(1, time.Minute)})}, ratewarden.ErrInvalidConfig, "Policy.Name"},
		{"policy name dup", l, []httplimit.Option{httplimit.WithPolicies(httplimit.Policy{Name: "a", Limit: fixed(1, time.Minute)}, httplimit.Policy{Name: "a", Limit: fixed(1, time.Hour)})}, ratewarden.ErrInvalidConfig, "twice"},
		{"nil key", l, []httplimit.Option{good, httplimit.WithKey(nil)}, ratewarden.ErrInvalidConfig, "WithKey"},
		{"nil cost", l, []httplimit.Option{good, httplimit.WithCost(nil)}, ratewarden.ErrInvalidConfig, "WithCost"},
		{"nil skip", l, []httplimit.Option{good, httplimit.WithSkip(nil)}, ratewarden.ErrInvalidConfig, "WithSkip"},
		{"nil denied", l, []httplimit.Option{good, httplimit.WithDeniedHandler(nil)}, ratewarden.ErrInvalidConfig, "WithDeniedHandler"},
		{"nil error", l, []httplimit.Option{good, httplimit.WithErrorHandler(nil)}, ratewarden.ErrInvalidConfig, "WithErrorHandler"},
		{"nil logger", l, []httplimit.Option{good, httplimit.WithLogger(nil)}, ratewarden.ErrInvalidConfig, "WithLogger"},
		{"bad headers", l, []httplimit.Option{good, httplimit.WithHeaders(0x80)}, ratewarden.ErrInvalidConfig, "WithHeaders"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := httplimit.New(tc.l, tc.opts...)
			if m != nil || !errors.Is(err, tc.target) {
				t.Fatalf("New = %v, %v; want nil and an error wrapping %v", m, err, tc.target)
			}
			if !strings.HasPrefix(err.Error(), "httplimit: ") || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not start with httplimit: or name %q", err, tc.field)
			}
		})
	}
}

// With the store wrapped by a failure policy (package fallback), an outage
// arrives as degraded Results, which the middleware honours like any other.
func TestDegradedResultsAreHonoured(t *testing.T) {
	cases := []struct {
		policy fallback.Policy
		codes  []int
	}{
		{fallback.FailOpen, []int{200, 200, 200}},
		{fallback.FailClosed, []int{429, 429, 429}},
		// This replica's share of 4 per minute across 2 replicas: 2.
		{fallback.LocalFallback, []int{200, 200, 429}},
	}
	for _, tc := range cases {
		t.Run(tc.policy.String(), func(t *testing.T) {
			l, log := outageLimiter(t, tc.policy)
			var sources []ratewarden.Source
			h := mustNew(t, l, httplimit.WithLimits(fixed(4, time.Minute)), httplimit.WithLogger(log),
				httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) { sources = append(sources, i.Decision.Results[0].Source) }),
			).Handler(new(ok))
			var codes []int
			for range 3 {
				w := get(h, client, "/", nil)
				codes = append(codes, w.Code)
				if w.Code == http.StatusTooManyRequests && tc.policy == fallback.FailClosed && w.Header().Get("Retry-After") != "7" {
					t.Errorf("Retry-After %q, want the policy's 7", w.Header().Get("Retry-After"))
				}
			}
			if !equalInts(codes, tc.codes) {
				t.Errorf("codes %v, want %v", codes, tc.codes)
			}
			for _, s := range sources {
				if !s.Degraded() {
					t.Errorf("denial from source %v, want a degraded one", s)
				}
			}
		})
	}
}

// Handler has the standard middleware shape that chi's Use and other
// routers take.
var _ func(http.Handler) http.Handler = (*httplimit.Middleware)(nil).Handler
