package fiberlimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/fiberlimit"
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

func mustFiber(t *testing.T, mw *httplimit.Middleware, opts ...fiberlimit.Option) *fiberlimit.Middleware {
	t.Helper()
	m, err := fiberlimit.New(mw, opts...)
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

// listen serves app on a loopback port until the test ends and returns
// its base URL.
func listen(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = app.Listener(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = app.ShutdownWithContext(ctx)
		<-done
	})
	return "http://" + ln.Addr().String()
}

func newApp() *fiber.App { return fiber.New(fiber.Config{DisableStartupMessage: true}) }

// Three fiber instances, each with its own Redis client, share one
// redis-server: 10 per hour is 10 in total. Every answer carries the
// headers httplimit's Handler sends for the same sequence (on a twin
// redis-server); denials are c.Status(429).JSON of the same problem body,
// the route's handler not run.
func TestReplicasShareOneRedis(t *testing.T) {
	srv, twinSrv := testredis.Start(t), testredis.Start(t)
	var served atomic.Int64
	var urls []string
	for range 3 {
		fl := mustFiber(t, mustHTTPLimit(t, redisLimiter(t, srv.Addr), httplimit.WithLimits(perHour)))
		app := newApp()
		app.Use(fl.Handler())
		app.Get("/items/:id", func(c *fiber.Ctx) error { served.Add(1); return c.SendString("item " + c.Params("id")) })
		urls = append(urls, listen(t, app))
	}
	twin := httptest.NewServer(mustHTTPLimit(t, redisLimiter(t, twinSrv.Addr), httplimit.WithLimits(perHour)).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "item 7") })))
	t.Cleanup(twin.Close)
	c := client(t)
	codes := map[int]int{}
	for i := range 30 {
		got, want := fetch(t, c, urls[i%3]+"/items/7"), fetch(t, c, twin.URL+"/items/7")
		codes[got.status]++
		if got.status != want.status {
			t.Fatalf("request %d: fiber %d, httplimit %d", i, got.status, want.status)
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

// sameHeaders compares the rate limit headers of a fiber answer with
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

// Check from a fiber handler by a key from the body; errors are the
// problem bodies; the key function reads fiber's headers.
func TestCheckAndErrors(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(2)}}}))
	fl := mustFiber(t, mw)
	app := newApp()
	app.Post("/login", func(c *fiber.Ctx) error {
		if ok, err := fl.Check(c, c.FormValue("user")); !ok {
			return err
		}
		return c.SendString("welcome")
	})
	base := listen(t, app)
	hc := client(t)
	var codes []string
	for _, user := range []string{"ann", "ann", "ann", "bob", ""} {
		resp, err := hc.PostForm(base+"/login", url.Values{"user": {user}})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, strconv.Itoa(resp.StatusCode))
		if resp.StatusCode != 200 && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("user %q: Content-Type %q", user, resp.Header.Get("Content-Type"))
		}
	}
	if got := strings.Join(codes, " "); got != "200 200 429 200 400" {
		t.Errorf("codes %s; want ann 2 of 3, bob 1, empty key 400", got)
	}
	mw2 := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	app2 := newApp()
	app2.Use(mustFiber(t, mw2).Handler())
	app2.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	base2 := listen(t, app2)
	get := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, base2+"/", nil)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := []int{get(""), get("a"), get("a"), get("b")}; got[0] != 400 || got[1] != 200 || got[2] != 429 || got[3] != 200 {
		t.Errorf("by header: %v; want 400 200 429 200", got)
	}
}

func TestNewErrors(t *testing.T) {
	mw := mustHTTPLimit(t, memLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)))
	for _, tc := range []struct {
		mw   *httplimit.Middleware
		opts []fiberlimit.Option
		want string
	}{
		{nil, nil, "middleware must not be nil"},
		{mw, []fiberlimit.Option{nil}, "option 0 is nil"},
		{mw, []fiberlimit.Option{fiberlimit.WithDeniedHandler(nil)}, "WithDeniedHandler"},
		{mw, []fiberlimit.Option{fiberlimit.WithErrorHandler(nil)}, "WithErrorHandler"},
	} {
		if _, err := fiberlimit.New(tc.mw, tc.opts...); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v; want %q", err, tc.want)
		}
	}
}
