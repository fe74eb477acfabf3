package ginlimit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/ginlimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

func mustGin(t *testing.T, mw *httplimit.Middleware, opts ...ginlimit.Option) *ginlimit.Middleware {
	t.Helper()
	g, err := ginlimit.New(mw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Three gin instances, each with its own Redis client, share one
// redis-server: 10 per hour is 10 in total. Every answer carries the
// headers httplimit's Handler sends for the same sequence (on a twin
// redis-server), and denials are gin's AbortWithStatusJSON of the same
// problem body, with the route's handler not run.
func TestReplicasShareOneRedis(t *testing.T) {
	adaptertest.ReplicasShareOneRedis(t, "gin", func(t *testing.T, mw *httplimit.Middleware, served func()) string {
		r := gin.New()
		r.Use(mustGin(t, mw).Handler())
		r.GET("/items/:id", func(c *gin.Context) { served(); c.String(http.StatusOK, "item "+c.Param("id")) })
		s := httptest.NewServer(r)
		t.Cleanup(s.Close)
		return s.URL
	})
}

// The route is the request's Pattern: httplimit.Pattern keys by it.
func TestPatternIsTheRoute(t *testing.T) {
	var keys []string
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Pattern))
	g := mustGin(t, mw, ginlimit.WithDeniedHandler(func(c *gin.Context, info httplimit.Info) {
		keys = append(keys, info.Key)
		c.AbortWithStatus(http.StatusTooManyRequests)
	}))
	r := gin.New()
	r.Use(g.Handler())
	r.GET("/items/:id", func(c *gin.Context) { c.String(200, "ok") })
	for _, p := range []string{"/items/1", "/items/2"} {
		adaptertest.Serve(r, http.MethodGet, p, nil)
	}
	if strings.Join(keys, ",") != "default|route:GET /items/:id" {
		t.Errorf("denied keys %q; want the second item denied on the route's key", keys)
	}
}

// Check from a gin handler by a key from the body; errors are the
// problem bodies, attached to c.Errors.
func TestCheckAndErrors(t *testing.T) {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(2)}}}))
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
		w := adaptertest.Serve(r, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}}.Encode()))
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
	mw2 := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	e := gin.New()
	e.Use(mustGin(t, mw2).Handler())
	e.GET("/", func(c *gin.Context) { t.Error("handler ran without a key") })
	if w := adaptertest.Serve(e, http.MethodGet, "/", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "does not identify a client") {
		t.Errorf("no key: %d %q", w.Code, w.Body.String())
	}
}

func TestNewErrors(t *testing.T) {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)))
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

// holdReplica is the gin replica of the hold tests: gin's recovery, then
// the adapter, then the route, which answers statuses from 400 up with
// c.AbortWithStatus.
func holdReplica(t *testing.T, mw *httplimit.Middleware, handle func(string) int) string {
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
	r.Use(mustGin(t, mw).Handler())
	r.GET("/r", func(c *gin.Context) {
		if s := handle(c.Request.URL.RawQuery); s >= 400 {
			c.AbortWithStatus(s)
		} else {
			c.String(s, "ok")
		}
	})
	s := httptest.NewServer(r)
	t.Cleanup(s.Close)
	return s.URL
}

// WithCountIf(Failed) on three replicas: successful logins consume
// nothing, 5 failures block the 6th, answer by answer as httplimit.
func TestCountIfLogins(t *testing.T) { adaptertest.CountIfLogins(t, "gin", holdReplica) }

// WithMaxInFlight on three replicas: exactly max in the handler, every
// permit released when its request ends.
func TestMaxInFlight(t *testing.T) { adaptertest.MaxInFlight(t, "gin", holdReplica) }

// A panic counts, releases its permit, and reaches gin's recovery.
func TestPanicCounts(t *testing.T) { adaptertest.PanicCounts(t, "gin", holdReplica) }

// loginRouter is a login route limited by Check on the user name, under
// WithCountIf(Failed) and WithMaxInFlight(1): "good" is the password.
func loginRouter(t *testing.T, settle bool) *gin.Engine {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t),
		httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: adaptertest.Logins}}}),
		httplimit.WithCountIf(httplimit.Failed), httplimit.WithMaxInFlight(1, 30*time.Second))
	g := mustGin(t, mw)
	login := func(c *gin.Context) {
		if !g.Check(c, c.PostForm("user")) {
			return
		}
		if c.PostForm("pass") != "good" {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		c.String(http.StatusOK, "welcome")
	}
	r := gin.New()
	if settle {
		r.POST("/login", ginlimit.Settle(), login)
	} else {
		r.POST("/login", login)
	}
	return r
}

func login(r http.Handler, user, pass string) int {
	return adaptertest.Serve(r, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}, "pass": {pass}}.Encode())).Code
}

// Check under Settle is settled by the outcome: successes consume
// nothing, 5 failures of a user block that user only, and each check's
// permit is released when the request ends (one at a time would be
// denied otherwise).
func TestCheckSettled(t *testing.T) {
	r := loginRouter(t, true)
	adaptertest.CheckSettled(t, func(user, pass string) int { return login(r, user, pass) })
}

// Without Handler or Settle a check is ended when the request's context
// is done; the test recorder's never is, so at once, with status 0: every
// request counts, successes too.
func TestCheckUnsettledCounts(t *testing.T) {
	r := loginRouter(t, false)
	for i := range 5 {
		if code := login(r, "ann", "good"); code != http.StatusOK {
			t.Fatalf("success %d: %d; want 200", i, code)
		}
	}
	if code := login(r, "ann", "good"); code != http.StatusTooManyRequests {
		t.Errorf("6th success without Settle: %d; want 429, each check counted", code)
	}
}
