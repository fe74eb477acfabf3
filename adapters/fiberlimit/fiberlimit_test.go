package fiberlimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

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
