package ginlimit_test

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

	"github.com/gin-gonic/gin"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/ginlimit"
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

func mustHTTPLimit(t *testing.T, l *ratewarden.Limiter, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustGin(t *testing.T, mw *httplimit.Middleware, opts ...ginlimit.Option) *ginlimit.Middleware {
	t.Helper()
	g, err := ginlimit.New(mw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
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

// Three gin instances, each with its own Redis client, share one
// redis-server: 10 per hour is 10 in total. Every answer carries the
// headers httplimit's Handler sends for the same sequence (on a twin
// redis-server), and denials are gin's AbortWithStatusJSON of the same
// problem body, with the route's handler not run.
func TestReplicasShareOneRedis(t *testing.T) {
	srv, twinSrv := testredis.Start(t), testredis.Start(t)
	var served atomic.Int64
	var urls []string
	for range 3 {
		g := mustGin(t, mustHTTPLimit(t, redisLimiter(t, srv.Addr), httplimit.WithLimits(perHour)))
		r := gin.New()
		r.Use(g.Handler())
		r.GET("/items/:id", func(c *gin.Context) { served.Add(1); c.String(http.StatusOK, "item "+c.Param("id")) })
		s := httptest.NewServer(r)
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
			t.Fatalf("request %d: gin %d, httplimit %d", i, got.status, want.status)
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

// sameHeaders compares the rate limit headers of a gin answer with
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

func serve(h http.Handler, method, target string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	if body != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The route is the request's Pattern: httplimit.Pattern keys by it.
func TestPatternIsTheRoute(t *testing.T) {
	var keys []string
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Pattern))
	g := mustGin(t, mw, ginlimit.WithDeniedHandler(func(c *gin.Context, info httplimit.Info) {
		keys = append(keys, info.Key)
		c.AbortWithStatus(http.StatusTooManyRequests)
	}))
	r := gin.New()
	r.Use(g.Handler())
	r.GET("/items/:id", func(c *gin.Context) { c.String(200, "ok") })
	for _, p := range []string{"/items/1", "/items/2"} {
		serve(r, http.MethodGet, p, nil)
	}
	if strings.Join(keys, ",") != "default|route:GET /items/:id" {
		t.Errorf("denied keys %q; want the second item denied on the route's key", keys)
	}
}

// Check from a gin handler by a key from the body; errors are the
// problem bodies, attached to c.Errors.
func TestCheckAndErrors(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(2)}}}))
	g := mustGin(t, mw)
	var ginErrs []string
	r := gin.New()
	r.POST("/login", func(c *gin.Context) {
		ok := g.Check(c, c.PostForm("user"))
		ginErrs = append(ginErrs, c.Errors.String())
		if ok {
			c.String(200, "welcome")
		}
	})
	var codes []int
	for _, user := range []string{"ann", "ann", "ann", "bob", ""} {
		w := serve(r, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}}.Encode()))
		codes = append(codes, w.Code)
		if w.Code != 200 && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("user %q: Content-Type %q", user, w.Header().Get("Content-Type"))
		}
	}
	if got := strconv.Itoa(codes[0]) + strconv.Itoa(codes[1]) + strconv.Itoa(codes[2]) + strconv.Itoa(codes[3]) + strconv.Itoa(codes[4]); got != "200200429200400" {
		t.Errorf("codes %v; want ann 2 of 3, bob 1, empty key 400", codes)
	}
	if !strings.Contains(ginErrs[4], "key must not be empty") {
		t.Errorf("c.Errors of the empty key: %q", ginErrs[4])
	}
	// The key function's error through Handler.
	mw2 := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	e := gin.New()
	e.Use(mustGin(t, mw2).Handler())
	e.GET("/", func(c *gin.Context) { t.Error("handler ran without a key") })
	if w := serve(e, http.MethodGet, "/", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "does not identify a client") {
		t.Errorf("no key: %d %q", w.Code, w.Body.String())
	}
}

func TestNewErrors(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)))
	for _, tc := range []struct {
		mw   *httplimit.Middleware
		opts []ginlimit.Option
		want string
	}{
		{nil, nil, "middleware must not be nil"},
		{mw, []ginlimit.Option{nil}, "option 0 is nil"},
		{mw, []ginlimit.Option{ginlimit.WithDeniedHandler(nil)}, "WithDeniedHandler"},
		{mw, []ginlimit.Option{ginlimit.WithErrorHandler(nil)}, "WithErrorHandler"},
	} {
		if _, err := ginlimit.New(tc.mw, tc.opts...); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v; want %q", err, tc.want)
		}
	}
}
