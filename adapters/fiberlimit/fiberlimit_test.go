package fiberlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/fiberlimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

func mustFiber(t *testing.T, mw *httplimit.Middleware, opts ...fiberlimit.Option) *fiberlimit.Middleware {
	t.Helper()
	m, err := fiberlimit.New(mw, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
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
	adaptertest.ReplicasShareOneRedis(t, "fiber", func(t *testing.T, mw *httplimit.Middleware, served func()) string {
		app := newApp()
		app.Use(mustFiber(t, mw).Handler())
		app.Get("/items/:id", func(c *fiber.Ctx) error { served(); return c.SendString("item " + c.Params("id")) })
		return listen(t, app)
	})
}

// Check from a fiber handler by a key from the body; errors are the
// problem bodies; the key function reads fiber's headers.
func TestCheckAndErrors(t *testing.T) {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: ratewarden.PerMinute(2)}}}))
	fl := mustFiber(t, mw)
	app := newApp()
	app.Post("/login", func(c *fiber.Ctx) error {
		if ok, err := fl.Check(c, c.FormValue("user")); !ok {
			return err
		}
		return c.SendString("welcome")
	})
	base := listen(t, app)
	hc := adaptertest.Client(t)
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
	mw2 := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}), httplimit.WithKey(httplimit.Header("X-Api-Key")))
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
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(ratewarden.PerMinute(2)))
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

// holdReplica is the fiber replica of the hold tests: fiber's recover,
// then the adapter, then the route, which returns a *fiber.Error for
// statuses from 400 up, for the app's error handler to write.
func holdReplica(opts ...fiberlimit.Option) adaptertest.HoldReplica {
	return func(t *testing.T, mw *httplimit.Middleware, handle func(string) int) string {
		app := newApp()
		app.Use(recover.New())
		app.Use(mustFiber(t, mw, opts...).Handler())
		app.Get("/r", func(c *fiber.Ctx) error {
			if s := handle(string(c.Request().URI().QueryString())); s >= 400 {
				return fiber.NewError(s)
			} else {
				return c.Status(s).SendString("ok")
			}
		})
		return listen(t, app)
	}
}

// WithCountIf(Failed) on three replicas: successful logins consume
// nothing, 5 failures (returned *fiber.Error 401) block the 6th, answer
// by answer as httplimit; with and without WithHandleError.
func TestCountIfLogins(t *testing.T) {
	t.Run("HandleError", func(t *testing.T) { adaptertest.CountIfLogins(t, "fiber", holdReplica()) })
	t.Run("NoHandleError", func(t *testing.T) {
		adaptertest.CountIfLogins(t, "fiber", holdReplica(fiberlimit.WithHandleError(false)))
	})
}

// WithMaxInFlight on three replicas: exactly max in the handler, every
// permit released when its request ends.
func TestMaxInFlight(t *testing.T) { adaptertest.MaxInFlight(t, "fiber", holdReplica()) }

// A panic counts, releases its permit, and reaches fiber's recover.
func TestPanicCounts(t *testing.T) { adaptertest.PanicCounts(t, "fiber", holdReplica()) }

var errBadPassword = errors.New("bad password")

// loginApp is a login route limited by Check on the user name under
// WithCountIf (count) and WithMaxInFlight(1), behind Settle when settle;
// "good" is the password, a bad one returns errBadPassword, which the
// app's own error handler answers 401.
func loginApp(t *testing.T, count httplimit.CountFunc, settle bool, opts ...fiberlimit.Option) *fiber.App {
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t),
		httplimit.WithRule(httplimit.Rule{Name: "login", Policies: []httplimit.Policy{{Limit: adaptertest.Logins}}}),
		httplimit.WithCountIf(count), httplimit.WithMaxInFlight(1, 30*time.Second))
	fl := mustFiber(t, mw, opts...)
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		if errors.Is(err, errBadPassword) {
			return c.Status(http.StatusUnauthorized).SendString("no")
		}
		return fiber.DefaultErrorHandler(c, err)
	}})
	login := func(c *fiber.Ctx) error {
		if ok, err := fl.Check(c, c.FormValue("user")); !ok {
			return err
		}
		if c.FormValue("pass") != "good" {
			return fmt.Errorf("login: %w", errBadPassword)
		}
		return c.SendString("welcome")
	}
	if settle {
		app.Post("/login", fl.Settle(), login)
	} else {
		app.Post("/login", login)
	}
	return app
}

func login(t *testing.T, app *fiber.App, user, pass string) int {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"user": {user}, "pass": {pass}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := app.Test(r, -1)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Check under Settle is settled by the outcome, the custom error
// handler's 401 included: successes consume nothing, 5 failures of a user
// block that user only, and each check's permit is released when the
// request ends.
func TestCheckSettled(t *testing.T) {
	app := loginApp(t, httplimit.Failed, true)
	adaptertest.CheckSettled(t, func(user, pass string) int { return login(t, app, user, pass) })
}

// A CountFunc that counts 401 only sees the custom error handler's 401
// with WithHandleError (the default); without it the status is inferred
// as fiber's default handler would write it, 500 for errBadPassword, and
// the failures are not counted: the trade-off WithHandleError documents.
func TestHandleErrorCustomHandler(t *testing.T) {
	only401 := func(_ *http.Request, status int) bool { return status == http.StatusUnauthorized }
	for _, tc := range []struct {
		opts []fiberlimit.Option
		want int // the 6th failure's status
	}{
		{nil, http.StatusTooManyRequests},
		{[]fiberlimit.Option{fiberlimit.WithHandleError(false)}, http.StatusUnauthorized},
	} {
		app := loginApp(t, only401, true, tc.opts...)
		for range 5 {
			login(t, app, "ann", "bad")
		}
		if code := login(t, app, "ann", "bad"); code != tc.want {
			t.Errorf("%d options: 6th failure %d; want %d", len(tc.opts), code, tc.want)
		}
	}
}

// Without Handler or Settle a check is ended at once (fiber's user
// context never ends), with status 0: every request counts, successes
// too.
func TestCheckUnsettledCounts(t *testing.T) {
	app := loginApp(t, httplimit.Failed, false)
	for i := range 5 {
		if code := login(t, app, "ann", "good"); code != http.StatusOK {
			t.Fatalf("success %d: %d; want 200", i, code)
		}
	}
	if code := login(t, app, "ann", "good"); code != http.StatusTooManyRequests {
		t.Errorf("6th success without Settle: %d; want 429, each check counted", code)
	}
}

// Status follows fiber's DefaultErrorHandler.
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fiber.NewError(http.StatusUnauthorized), http.StatusUnauthorized},
		{fmt.Errorf("wrapped: %w", fiber.ErrNotFound), http.StatusNotFound},
		{errBadPassword, http.StatusInternalServerError},
	} {
		if got := fiberlimit.Status(tc.err); got != tc.want {
			t.Errorf("Status(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

// A permit is extended while the handler runs, although fiber's user
// context never ends: the adapter gives the request's view a context that
// ends with the handler. A request blocked for 1.5 ttls still holds its
// permit, so a second one is denied; once it ends, the next gets in.
// Each extension may come up to ttl/2 late (a busy machine's timers)
// before the permit lapses: ttl is long enough for that margin to be
// generous, and the wait past ttl proves the extensions.
func TestPermitExtendedWhileServed(t *testing.T) {
	const ttl = 4 * time.Second
	mw := adaptertest.Middleware(t, adaptertest.MemLimiter(t), httplimit.WithLimits(adaptertest.PerHour), httplimit.WithMaxInFlight(1, ttl))
	app := newApp()
	app.Use(mustFiber(t, mw).Handler())
	entered, release := make(chan struct{}), make(chan struct{})
	app.Get("/slow", func(c *fiber.Ctx) error { close(entered); <-release; return c.SendString("slow") })
	app.Get("/fast", func(c *fiber.Ctx) error { return c.SendString("fast") })
	u := listen(t, app)
	c := adaptertest.Client(t)
	slow := make(chan adaptertest.Reply, 1)
	go func() {
		resp, err := c.Get(u + "/slow")
		if err != nil {
			slow <- adaptertest.Reply{Body: err.Error()}
			return
		}
		_ = resp.Body.Close()
		slow <- adaptertest.Reply{Status: resp.StatusCode}
	}()
	<-entered
	time.Sleep(ttl * 3 / 2)
	got := adaptertest.Fetch(t, c, u+"/fast")
	close(release)
	if r := <-slow; r.Status != http.StatusOK {
		t.Fatalf("the slow request: %d %s", r.Status, r.Body)
	}
	if got.Status != http.StatusTooManyRequests {
		t.Errorf("a request %v after the slow one entered (ttl %v) answered %d; want 429: the slow one's permit must be extended", ttl*3/2, ttl, got.Status)
	}
	if r := adaptertest.Fetch(t, c, u+"/fast"); r.Status != http.StatusOK {
		t.Errorf("after the slow request ended: %d; want 200", r.Status)
	}
}
