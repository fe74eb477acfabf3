package echolimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

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
	adaptertest.Serve(e, http.MethodGet, "/items/1", nil)
	w := adaptertest.Serve(e, http.MethodGet, "/items/2", nil)
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
		w := adaptertest.Serve(e, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}}.Encode()))
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
	if w := adaptertest.Serve(e2, http.MethodGet, "/", nil); w.Code != 400 || !strings.Contains(w.Body.String(), "does not identify a client") {
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

// holdReplica is the echo replica of the hold tests: echo's Recover, then
// the adapter, then the route, which returns an *echo.HTTPError for
// statuses from 400 up, for echo's error handler to write.
func holdReplica(opts ...echolimit.Option) adaptertest.HoldReplica {
	return func(t *testing.T, mw *httplimit.Middleware, handle func(string) int) string {
		e := echo.New()
		e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
		e.Use(mustEcho(t, mw, opts...).Handler())
		e.GET("/r", func(c echo.Context) error {
			if s := handle(c.Request().URL.RawQuery); s >= 400 {
				return echo.NewHTTPError(s)
			} else {
				return c.String(s, "ok")
			}
		})
		s := httptest.NewServer(e)
		t.Cleanup(s.Close)
		return s.URL
	}
}

// WithCountIf(Failed) on three replicas: successful logins consume
// nothing, 5 failures (returned *echo.HTTPError 401) block the 6th,
// answer by answer as httplimit; with and without WithHandleError.
func TestCountIfLogins(t *testing.T) {
	t.Run("HandleError", func(t *testing.T) { adaptertest.CountIfLogins(t, "echo", holdReplica()) })
	t.Run("NoHandleError", func(t *testing.T) {
		adaptertest.CountIfLogins(t, "echo", holdReplica(echolimit.WithHandleError(false)))
	})
}

// WithMaxInFlight on three replicas: exactly max in the handler, every
// permit released when its request ends.
func TestMaxInFlight(t *testing.T) { adaptertest.MaxInFlight(t, "echo", holdReplica()) }

// A panic counts, releases its permit, and reaches echo's Recover.
func TestPanicCounts(t *testing.T) { adaptertest.PanicCounts(t, "echo", holdReplica()) }

var errBadPassword = errors.New("bad password")

// loginEcho is a login route limited by Check on the user name under
// WithCountIf (count) and WithMaxInFlight(1), behind Settle when settle;
// "good" is the password, a bad one returns errBadPassword, which the
// app's own error handler answers 401.
func loginEcho(t *testing.T, count httplimit.CountFunc, settle bool, opts ...echolimit.Option) *echo.Echo {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t),
		httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: adaptertest.Logins}}}),
		httplimit.WithCountIf(count), httplimit.WithMaxInFlight(1, 30*time.Second))
	el := mustEcho(t, mw, opts...)
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if errors.Is(err, errBadPassword) {
			_ = c.String(http.StatusUnauthorized, "no")
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	login := func(c echo.Context) error {
		if ok, err := el.Check(c, c.FormValue("user")); !ok {
			return err
		}
		if c.FormValue("pass") != "good" {
			return fmt.Errorf("login: %w", errBadPassword)
		}
		return c.String(http.StatusOK, "welcome")
	}
	if settle {
		e.POST("/login", login, el.Settle())
	} else {
		e.POST("/login", login)
	}
	return e
}

func login(h http.Handler, user, pass string) int {
	return adaptertest.Serve(h, http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}, "pass": {pass}}.Encode())).Code
}

// Check under Settle is settled by the outcome, the custom error
// handler's 401 included: successes consume nothing, 5 failures of a user
// block that user only, and each check's permit is released when the
// request ends.
func TestCheckSettled(t *testing.T) {
	e := loginEcho(t, httplimit.Failed, true)
	adaptertest.CheckSettled(t, func(user, pass string) int { return login(e, user, pass) })
}

// A CountFunc that counts 401 only sees the custom error handler's 401
// with WithHandleError (the default); without it the status is inferred
// as echo's default handler would write it, 500 for errBadPassword, and
// the failures are not counted: the trade-off WithHandleError documents.
func TestHandleErrorCustomHandler(t *testing.T) {
	only401 := func(_ *http.Request, status int) bool { return status == http.StatusUnauthorized }
	for _, tc := range []struct {
		opts []echolimit.Option
		want int // the 6th failure's status
	}{
		{nil, http.StatusTooManyRequests},
		{[]echolimit.Option{echolimit.WithHandleError(false)}, http.StatusUnauthorized},
	} {
		e := loginEcho(t, only401, true, tc.opts...)
		for range 5 {
			login(e, "ann", "bad")
		}
		if code := login(e, "ann", "bad"); code != tc.want {
			t.Errorf("%d options: 6th failure %d; want %d", len(tc.opts), code, tc.want)
		}
	}
}

// Without Handler or Settle a check is ended when the request's context
// is done; the test recorder's never is, so at once, with status 0: every
// request counts, successes too.
func TestCheckUnsettledCounts(t *testing.T) {
	e := loginEcho(t, httplimit.Failed, false)
	for i := range 5 {
		if code := login(e, "ann", "good"); code != http.StatusOK {
			t.Fatalf("success %d: %d; want 200", i, code)
		}
	}
	if code := login(e, "ann", "good"); code != http.StatusTooManyRequests {
		t.Errorf("6th success without Settle: %d; want 429, each check counted", code)
	}
}

// Status follows echo's DefaultHTTPErrorHandler.
func TestStatus(t *testing.T) {
	e := echo.New()
	newCtx := func() echo.Context {
		return e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{echo.NewHTTPError(http.StatusUnauthorized), http.StatusUnauthorized},
		{echo.NewHTTPError(http.StatusBadRequest).SetInternal(echo.NewHTTPError(http.StatusForbidden)), http.StatusForbidden},
		{fmt.Errorf("wrapped: %w", echo.ErrNotFound), http.StatusInternalServerError},
		{errBadPassword, http.StatusInternalServerError},
	} {
		if got := echolimit.Status(newCtx(), tc.err); got != tc.want {
			t.Errorf("Status(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
	c := newCtx()
	_ = c.NoContent(http.StatusAccepted)
	if got := echolimit.Status(c, echo.ErrNotFound); got != http.StatusAccepted {
		t.Errorf("Status of a committed response = %d; want the status written, 202", got)
	}
}
