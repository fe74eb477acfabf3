package echolimit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/echolimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

func mustEcho(t *testing.T, mw *httplimit.Middleware, opts ...echolimit.Option) *echolimit.Middleware {
	t.Helper()
	m, err := echolimit.New(mw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Three echo instances, each with its own Redis client, share one
// redis-server: 10 per hour is 10 in total. Every answer carries the
// headers httplimit's Handler sends for the same sequence (on a twin
// redis-server); denials are an *echo.HTTPError that echo's default error
// handler writes as the same problem body, the route's handler not run.
func TestReplicasShareOneRedis(t *testing.T) {
	adaptertest.ReplicasShareOneRedis(t, "echo", func(t *testing.T, mw *httplimit.Middleware, served func()) string {
		e := echo.New()
		e.Use(mustEcho(t, mw).Handler())
		e.GET("/items/:id", func(c echo.Context) error { served(); return c.String(http.StatusOK, "item "+c.Param("id")) })
		s := httptest.NewServer(e)
		t.Cleanup(s.Close)
		return s.URL
	})
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
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Pattern))
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
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(2)}}}))
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
	mw2 := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	e2 := echo.New()
	e2.Use(mustEcho(t, mw2).Handler())
	e2.GET("/", func(c echo.Context) error { t.Error("handler ran without a key"); return nil })
	if w := serve(e2, http.MethodGet, "/", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "does not identify a client") {
		t.Errorf("no key: %d %q", w.Code, w.Body.String())
	}
}

func TestNewErrors(t *testing.T) {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)))
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
