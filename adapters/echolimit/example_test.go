package echolimit_test

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v4"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/echolimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "203.0.113.7:5000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func ExampleNew() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(2)))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(el.Handler())
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	for range 3 {
		w := get(e, "/hello")
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	w := get(e, "/hello")
	fmt.Println(w.Header().Get("Content-Type"), w.Header().Get("Retry-After"))
	fmt.Print(w.Body.String())
	// Output:
	// 200 "2/1m";r=1;t=30
	// 200 "2/1m";r=0;t=60
	// 429 "2/1m";r=0;t=30
	// application/problem+json 30
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit \"2/1m\" exceeded; retry in 30 s.","retry_after":30,"violated-policies":["2/1m"]}
}

func ExampleMiddleware_Handler() {
	// One budget per route: every item shares it.
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Pattern))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.GET("/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, "item") }, el.Handler())
	fmt.Println(get(e, "/items/1").Code, get(e, "/items/2").Code)
	// Output: 200 429
}

func ExampleMiddleware_Check() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithRule(httplimit.Rule{
		Name: "login-user", Policies: []httplimit.Policy{{Name: "logins", Limit: ratewarden.PerMinute(1)}},
	}))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.GET("/login", func(c echo.Context) error {
		if ok, err := el.Check(c, "user:"+c.QueryParam("user")); !ok {
			return err
		}
		return c.String(http.StatusOK, "checking the password")
	})
	fmt.Println(get(e, "/login?user=ann").Code, get(e, "/login?user=ann").Code, get(e, "/login?user=bob").Code)
	// Output: 200 429 200
}

func ExampleDeniedError() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var de *echolimit.DeniedError
		if errors.As(err, &de) {
			_ = c.String(http.StatusTooManyRequests, "slow down: "+de.Info.Rule)
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(el.Handler())
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	get(e, "/")
	fmt.Println(get(e, "/").Body.String())
	// Output: slow down: default
}

func ExampleDeniedError_Error() {
	fmt.Println(&echolimit.DeniedError{Info: httplimit.Info{Rule: "default"}})
	// Output: echolimit: rate limit exceeded: rule default
}

func ExampleWithDeniedHandler() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw, echolimit.WithDeniedHandler(func(c echo.Context, info httplimit.Info) error {
		return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
	}))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(el.Handler())
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	get(e, "/")
	fmt.Print(get(e, "/").Body.String())
	// Output: {"message":"slow down"}
}

func ExampleWithErrorHandler() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
		return echo.NewHTTPError(http.StatusUnauthorized, "send an API key")
	}))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(el.Handler())
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	w := get(e, "/")
	fmt.Print(w.Code, " ", w.Body.String())
	// Output: 401 {"message":"send an API key"}
}

func ExampleDenied() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	// Denied is the default; a custom handler can log and then return it.
	el, err := echolimit.New(mw, echolimit.WithDeniedHandler(func(c echo.Context, info httplimit.Info) error {
		fmt.Println("denied", info.Key)
		return echolimit.Denied(c, info)
	}))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(el.Handler())
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	get(e, "/")
	fmt.Println(get(e, "/").Code)
	// Output:
	// denied default|ip:203.0.113.7
	// 429
}

func ExampleError() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw) // Error is the default
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(el.Handler())
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	w := get(e, "/")
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	// Output: 400 application/problem+json
}

// Login protection: only failed logins count (httplimit.WithCountIf with
// Failed), keyed by the user name the handler reads, so Check does the
// limiting and Settle settles each check by the status echo answers
// with, a returned *echo.HTTPError's included.
func ExampleMiddleware_Settle() {
	mw, err := httplimit.New(adaptertest.StillLimiter(),
		httplimit.WithRule(httplimit.Rule{Name: "login-user", Policies: []httplimit.Policy{{Name: "failures", Limit: ratewarden.PerHour(3)}}}),
		httplimit.WithCountIf(httplimit.Failed))
	if err != nil {
		log.Fatal(err)
	}
	el, err := echolimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.GET("/login", func(c echo.Context) error {
		if ok, err := el.Check(c, "user:"+c.QueryParam("user")); !ok {
			return err
		}
		if c.QueryParam("password") != "secret" {
			return echo.ErrUnauthorized
		}
		return c.String(http.StatusOK, "welcome")
	}, el.Settle())
	var codes []int
	for _, pw := range []string{"secret", "secret", "secret", "guess", "guess", "guess", "guess", "secret"} {
		codes = append(codes, get(e, "/login?user=ann&password="+pw).Code)
	}
	fmt.Println(codes)
	// Output: [200 200 200 401 401 401 429 429]
}

// With a custom error handler that answers errors of its own with
// statuses of its own, WithHandleError (on by default) lets Handler count
// the status it writes; Status is what would be inferred without it.
func ExampleWithHandleError() {
	errBadPassword := errors.New("bad password")
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if errors.Is(err, errBadPassword) && !c.Response().Committed {
			_ = c.NoContent(http.StatusUnauthorized)
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/login", nil), httptest.NewRecorder())
	fmt.Println("inferred:", echolimit.Status(c, errBadPassword))
	c.Error(errBadPassword) // what Handler does under WithHandleError(true)
	fmt.Println("written:", echolimit.Status(c, errBadPassword))
	// Output:
	// inferred: 500
	// written: 401
}

func ExampleStatus() {
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	fmt.Println(echolimit.Status(c, nil), echolimit.Status(c, echo.ErrForbidden), echolimit.Status(c, errors.New("boom")))
	// Output: 200 403 500
}
