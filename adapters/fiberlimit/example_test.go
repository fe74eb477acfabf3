package fiberlimit_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/gofiber/fiber/v2"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/fiberlimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

// send runs one request through app in memory (app.Test) and returns the
// response with its body read.
func send(app *fiber.App, path string) (*http.Response, string) {
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, path, nil))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func ExampleNew() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(2)))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fl.Handler())
	app.Get("/hello", func(c *fiber.Ctx) error { return c.SendString("hello") })
	for range 3 {
		resp, _ := send(app, "/hello")
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	resp, body := send(app, "/hello")
	fmt.Println(resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"))
	fmt.Println(body)
	// Output:
	// 200 "2/1m";r=1;t=30
	// 200 "2/1m";r=0;t=60
	// 429 "2/1m";r=0;t=30
	// application/problem+json 30
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit \"2/1m\" exceeded; retry in 30 s.","retry_after":30,"violated-policies":["2/1m"]}
}

func ExampleMiddleware_Handler() {
	// Limits on one route only, one budget shared by all its clients.
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Static("search")))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/search", fl.Handler(), func(c *fiber.Ctx) error { return c.SendString("results") })
	app.Get("/about", func(c *fiber.Ctx) error { return c.SendString("about") })
	a, _ := send(app, "/search")
	b, _ := send(app, "/search")
	c, _ := send(app, "/about")
	fmt.Println(a.StatusCode, b.StatusCode, c.StatusCode)
	// Output: 200 429 200
}

func ExampleMiddleware_Check() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithRule(httplimit.Rule{
		Name: "login-user", Policies: []httplimit.Policy{{Name: "logins", Limit: ratewarden.PerMinute(1)}},
	}))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/login", func(c *fiber.Ctx) error {
		if ok, err := fl.Check(c, "user:"+c.Query("user")); !ok {
			return err
		}
		return c.SendString("checking the password")
	})
	a, _ := send(app, "/login?user=ann")
	b, _ := send(app, "/login?user=ann")
	c, _ := send(app, "/login?user=bob")
	fmt.Println(a.StatusCode, b.StatusCode, c.StatusCode)
	// Output: 200 429 200
}

func ExampleWithDeniedHandler() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw, fiberlimit.WithDeniedHandler(func(c *fiber.Ctx, info httplimit.Info) error {
		return c.Status(fiber.StatusTooManyRequests).JSON(fiber.Map{"error": "slow down", "rule": info.Rule})
	}))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fl.Handler())
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	send(app, "/")
	_, body := send(app, "/")
	fmt.Println(body)
	// Output: {"error":"slow down","rule":"default"}
}

func ExampleWithErrorHandler() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) error {
		return fiber.NewError(fiber.StatusUnauthorized, "send an API key")
	}))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fl.Handler())
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	resp, body := send(app, "/")
	fmt.Println(resp.StatusCode, body)
	// Output: 401 send an API key
}

func ExampleDenied() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Static("all")))
	if err != nil {
		log.Fatal(err)
	}
	// Denied is the default; a custom handler can log and then call it.
	fl, err := fiberlimit.New(mw, fiberlimit.WithDeniedHandler(func(c *fiber.Ctx, info httplimit.Info) error {
		fmt.Println("denied", info.Key)
		return fiberlimit.Denied(c, info)
	}))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fl.Handler())
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	send(app, "/")
	resp, _ := send(app, "/")
	fmt.Println(resp.StatusCode)
	// Output:
	// denied default|all
	// 429
}

func ExampleError() {
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw) // Error is the default
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fl.Handler())
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	resp, _ := send(app, "/")
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output: 400 application/problem+json
}

// Login protection: only failed logins count (httplimit.WithCountIf with
// Failed), keyed by the user name the handler reads, so Check does the
// limiting and Settle settles each check by the status fiber answers
// with, a returned *fiber.Error's included.
func ExampleMiddleware_Settle() {
	mw, err := httplimit.New(adaptertest.StillLimiter(),
		httplimit.WithRule(httplimit.Rule{Name: "login-user", Policies: []httplimit.Policy{{Name: "failures", Limit: ratewarden.PerHour(3)}}}),
		httplimit.WithCountIf(httplimit.Failed))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/login", fl.Settle(), func(c *fiber.Ctx) error {
		if ok, err := fl.Check(c, "user:"+c.Query("user")); !ok {
			return err
		}
		if c.Query("password") != "secret" {
			return fiber.ErrUnauthorized
		}
		return c.SendString("welcome")
	})
	var codes []int
	for _, pw := range []string{"secret", "secret", "secret", "guess", "guess", "guess", "guess", "secret"} {
		resp, _ := send(app, "/login?user=ann&password="+pw)
		codes = append(codes, resp.StatusCode)
	}
	fmt.Println(codes)
	// Output: [200 200 200 401 401 401 429 429]
}

// Handler answers a handler's error with the app's error handler, so
// that the status counted is the one sent: here a custom 401 for an error
// of the app's own, which Status (the inference without WithHandleError)
// would take for a 500.
func ExampleWithHandleError() {
	errBadPassword := errors.New("bad password")
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerHour(100)), httplimit.WithCountIf(httplimit.Failed))
	if err != nil {
		log.Fatal(err)
	}
	fl, err := fiberlimit.New(mw, fiberlimit.WithHandleError(true)) // the default
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		if errors.Is(err, errBadPassword) {
			return c.SendStatus(http.StatusUnauthorized)
		}
		return fiber.DefaultErrorHandler(c, err)
	}})
	app.Use(fl.Handler())
	app.Get("/login", func(c *fiber.Ctx) error { return errBadPassword })
	resp, _ := send(app, "/login")
	fmt.Println(resp.StatusCode, fiberlimit.Status(errBadPassword))
	// Output: 401 500
}

func ExampleStatus() {
	fmt.Println(fiberlimit.Status(fiber.ErrForbidden), fiberlimit.Status(fmt.Errorf("wrapped: %w", fiber.ErrNotFound)), fiberlimit.Status(errors.New("boom")))
	// Output: 403 404 500
}
