package echolimit_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/echolimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
)

// perHour is exact (SlidingLog) and nothing leaves its window during a test.
var perHour = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 10, Period: time.Hour}

func redisLimiter(t *testing.T, addr string) *ratewarden.Limiter {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func memLimiter(t *testing.T) *ratewarden.Limiter {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustHTTPLimit(t *testing.T, l *ratewarden.Limiter, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustEcho(t *testing.T, mw *httplimit.Middleware, opts ...echolimit.Option) *echolimit.Middleware {
	t.Helper()
	m, err := echolimit.New(mw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type reply struct {
	status int
	header http.Header
	body   string
}

func fetch(t *testing.T, c *http.Client, u string) reply {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// Three echo instances, each with its own Redis client, share one
// redis-server: 10 per hour is 10 in total. Every answer carries the
// headers httplimit's Handler sends for the same sequence (on a twin
// redis-server); denials are an *echo.HTTPError that echo's default error
// handler writes as the same problem body, the route's handler not run.
func TestReplicasShareOneRedis(t *testing.T) {
	srv, twinSrv := testredis.Start(t), testredis.Start(t)
	var served atomic.Int64
	var urls []string
	for range 3 {
		el := mustEcho(t, mustHTTPLimit(t, redisLimiter(t, srv.Addr), httplimit.WithLimits(perHour)))
		e := echo.New()
		e.Use(el.Handler())
		e.GET("/items/:id", func(c echo.Context) error { served.Add(1); return c.String(http.StatusOK, "item "+c.Param("id")) })
		s := httptest.NewServer(e)
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	twin := httptest.NewServer(mustHTTPLimit(t, redisLimiter(t, twinSrv.Addr), httplimit.WithLimits(perHour)).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "item 7") })))
	t.Cleanup(twin.Close)
	c := client(t)
	codes := map[int]int{}
	for i := range 30 {
		got, want := fetch(t, c, urls[i%3]+"/items/7"), fetch(t, c, twin.URL+"/items/7")
		codes[got.status]++
		if got.status != want.status {
			t.Fatalf("request %d: echo %d, httplimit %d", i, got.status, want.status)
		}
		sameHeaders(t, i, got.header, want.header)
		if got.status == http.StatusTooManyRequests {
			if got.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("request %d: Content-Type %q", i, got.header.Get("Content-Type"))
			}
			var p, wp httplimit.Problem
			if err := json.Unmarshal([]byte(got.body), &p); err != nil {
				t.Fatalf("request %d: body %q: %v", i, got.body, err)
			}
			_ = json.Unmarshal([]byte(want.body), &wp)
			if p.Type != httplimit.ProblemTypeQuotaExceeded || p.Status != 429 || strings.Join(p.ViolatedPolicies, ",") != strings.Join(wp.ViolatedPolicies, ",") || p.Title != wp.Title {
				t.Errorf("request %d: problem %+v, httplimit's %+v", i, p, wp)
			}
		}
	}
	if codes[200] != 10 || codes[429] != 20 || served.Load() != 10 {
		t.Errorf("statuses %v, handler ran %d times; want exactly 10 admitted of 30", codes, served.Load())
	}
}

// sameHeaders compares the rate limit headers of an echo answer with
// httplimit's: equal, but for t and the reset instant, which move with the
// clock between the two requests.
func sameHeaders(t *testing.T, i int, got, want http.Header) {
	t.Helper()
	for _, name := range []string{"RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "Cache-Control"} {
		if got.Get(name) != want.Get(name) {
			t.Errorf("request %d: %s %q, httplimit %q", i, name, got.Get(name), want.Get(name))
		}
	}
	for _, name := range []string{"RateLimit", "X-RateLimit-Reset", "Retry-After"} {
		g, w := got.Get(name), want.Get(name)
		if (g == "") != (w == "") || (g != "" && !near(g, w)) {
			t.Errorf("request %d: %s %q, httplimit %q", i, name, g, w)
		}
	}
}

// near reports whether two header values agree up to the last number,
// which may differ by one (a second boundary between the requests).
func near(a, b string) bool {
	ia, ib := strings.LastIndexAny(a, "=: ")+1, strings.LastIndexAny(b, "=: ")+1
	if a[:ia] != b[:ib] {
		return false
	}
	na, err1 := strconv.ParseInt(a[ia:], 10, 64)
	nb, err2 := strconv.ParseInt(b[ib:], 10, 64)
	return err1 == nil && err2 == nil && na-nb <= 1 && nb-na <= 1
}

func serve(h http.Handler, method, target string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	if body != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A custom error handler finds the decision with errors.As; the route is
// the request's Pattern.
func TestErrorHandlerSeesDecision(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Pattern))
	e := echo.New()
	var keys []string
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var de *echolimit.DeniedError
		if errors.As(err, &de) {
			keys = append(keys, de.Info.Key)
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(mustEcho(t, mw).Handler())
	e.GET("/items/:id", func(c echo.Context) error { return c.String(200, "ok") })
	serve(e, http.MethodGet, "/items/1", nil)
	w := serve(e, http.MethodGet, "/items/2", nil)
	if w.Code != 429 || strings.Join(keys, ",") != "default|route:GET /items/:id" {
		t.Errorf("%d, denied keys %q; want the second item denied on the route's key", w.Code, keys)
	}
}

// Check from an echo handler by a key from the body; errors are the
// problem bodies.
func TestCheckAndErrors(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(2)}}}))
	el := mustEcho(t, mw)
	e := echo.New()
	e.POST("/login", func(c echo.Context) error {
		if ok, err := el.Check(c, c.FormValue("user")); !ok {
			return err
		}
		return c.String(200, "welcome")
	})
	var codes []string
	for _, user := range []string{"ann", "ann", "ann", "bob", ""} {
		w := serve(e, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}}.Encode()))
		codes = append(codes, strconv.Itoa(w.Code))
		if w.Code != 200 && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("user %q: Content-Type %q", user, w.Header().Get("Content-Type"))
		}
	}
	if got := strings.Join(codes, " "); got != "200 200 429 200 400" {
		t.Errorf("codes %s; want ann 2 of 3, bob 1, empty key 400", got)
	}
	mw2 := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	e2 := echo.New()
	e2.Use(mustEcho(t, mw2).Handler())
	e2.GET("/", func(c echo.Context) error { t.Error("handler ran without a key"); return nil })
	if w := serve(e2, http.MethodGet, "/", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "does not identify a client") {
		t.Errorf("no key: %d %q", w.Code, w.Body.String())
	}
}

func TestNewErrors(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)))
	for _, tc := range []struct {
		mw   *httplimit.Middleware
		opts []echolimit.Option
		want string
	}{
		{nil, nil, "middleware must not be nil"},
		{mw, []echolimit.Option{nil}, "option 0 is nil"},
		{mw, []echolimit.Option{echolimit.WithDeniedHandler(nil)}, "WithDeniedHandler"},
		{mw, []echolimit.Option{echolimit.WithErrorHandler(nil)}, "WithErrorHandler"},
	} {
		if _, err := echolimit.New(tc.mw, tc.opts...); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v; want %q", err, tc.want)
		}
	}
}
