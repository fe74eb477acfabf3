package httplimit_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// loginLimit is the login protection of the tests: 5 per 15 minutes, on
// a window that starts at the bubble's epoch.
var loginLimit = fixed(5, 15*time.Minute)

// login answers 200 to the password "right" and 401 to any other, and
// counts its calls.
type login struct {
	mu sync.Mutex
	n  int
}

func (h *login) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	if r.URL.Query().Get("password") != "right" {
		http.Error(w, "wrong password", http.StatusUnauthorized)
		return
	}
	_, _ = w.Write([]byte("welcome"))
}

func (h *login) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// remaining peeks at what the client has left under the middleware's
// default rule (one policy).
func remaining(t *testing.T, m *httplimit.Middleware, remote string) int64 {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	info, err := m.Peek(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return info.Decision.Results[0].Remaining
}

// Login protection: successful logins give their unit back, failures
// keep it; the sixth failure is denied before the handler runs, until the
// window ends.
func TestCountIfFailedLogins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(loginLimit), httplimit.WithCountIf(httplimit.Failed))
		next := new(login)
		h := m.Handler(next)
		for i := range 20 {
			w := get(h, client, "/login?password=right", nil)
			// The headers show the reservation's decision: 1 unit taken,
			// given back after the response was written.
			if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "4" {
				t.Fatalf("success %d: %d, remaining %q; want 200 and 4", i, w.Code, w.Header().Get("X-RateLimit-Remaining"))
			}
		}
		if got := remaining(t, m, client); got != 5 {
			t.Fatalf("after 20 successful logins %d remain, want all 5", got)
		}
		for i := range 5 {
			w := get(h, client, "/login?password=wrong", nil)
			if w.Code != http.StatusUnauthorized || w.Header().Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) {
				t.Fatalf("failure %d: %d, remaining %q; want 401 and %d", i, w.Code, w.Header().Get("X-RateLimit-Remaining"), 4-i)
			}
		}
		calls := next.calls()
		// Blocked now, whatever the password: the handler does not run.
		for _, pw := range []string{"wrong", "right"} {
			w := get(h, client, "/login?password="+pw, nil)
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "900" {
				t.Errorf("password %s after 5 failures: %d, Retry-After %q; want 429 and 900", pw, w.Code, w.Header().Get("Retry-After"))
			}
		}
		if next.calls() != calls {
			t.Errorf("the handler ran %d times for denied requests", next.calls()-calls)
		}
		// Another client is not affected.
		if w := get(h, "203.0.113.9:1", "/login?password=wrong", nil); w.Code != http.StatusUnauthorized {
			t.Errorf("another client: %d, want 401", w.Code)
		}
		// Blocked for the window: still at 14m59s, admitted at 15m.
		time.Sleep(15*time.Minute - time.Second)
		if w := get(h, client, "/login?password=right", nil); w.Code != http.StatusTooManyRequests {
			t.Errorf("1 s before the window ends: %d, want 429", w.Code)
		}
		time.Sleep(time.Second)
		if w := get(h, client, "/login?password=right", nil); w.Code != http.StatusOK {
			t.Errorf("when the window ends: %d, want 200", w.Code)
		}
	})
}

// Requests in flight count until they end: 10 concurrent logins against
// a limit of 5 let 5 through and deny 5, although all 10 would succeed;
// once they end, all 5 units are back.
func TestCountIfInFlightCountProvisionally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(loginLimit), httplimit.WithCountIf(httplimit.Failed))
		release := make(chan struct{})
		var entered atomic.Int32
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.Add(1)
			<-release
		}))
		codes := make(chan int, 10)
		for range 10 {
			go func() { codes <- get(h, client, "/", nil).Code }()
		}
		synctest.Wait() // every request reached the handler or was answered
		if entered.Load() != 5 || len(codes) != 5 {
			t.Fatalf("%d in the handler and %d answered; want 5 and 5", entered.Load(), len(codes))
		}
		for range 5 {
			if c := <-codes; c != http.StatusTooManyRequests {
				t.Errorf("answered while 5 were in flight: %d, want 429", c)
			}
		}
		close(release)
		for range 5 {
			if c := <-codes; c != http.StatusOK {
				t.Errorf("in flight: %d, want 200", c)
			}
		}
		if got := remaining(t, m, client); got != 5 {
			t.Errorf("after 5 successes %d remain, want 5", got)
		}
	})
}

// The status the CountFunc sees, for each way a handler can answer.
func TestCountIfStatus(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    int
	}{
		{"WriteHeader", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }, 403},
		{"Error", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusUnauthorized) }, 401},
		{"Write", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }, 200},
		{"nothing", func(http.ResponseWriter, *http.Request) {}, 200},
		{"second WriteHeader ignored", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.WriteHeader(http.StatusOK)
		}, 404},
		{"informational first", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusTooManyRequests)
		}, 429},
		{"Flush", func(w http.ResponseWriter, _ *http.Request) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			w.WriteHeader(http.StatusInternalServerError) // too late: 200 was sent
		}, 200},
		// io.Copy to the writer goes through its ReadFrom.
		{"ReadFrom", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.Copy(w, struct{ io.Reader }{strings.NewReader("body")})
		}, 200},
		{"WriteHeader, ReadFrom", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.Copy(w, struct{ io.Reader }{strings.NewReader("body")})
		}, 418},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, seen := countingMiddleware(t)
			srv := httptest.NewUnstartedServer(m.Handler(tc.handler))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // superfluous WriteHeader calls, on purpose
			srv.Start()
			defer srv.Close()
			fetch(t, srv.Client(), srv.URL)
			if got := seen(1); len(got) != 1 || got[0] != tc.want {
				t.Errorf("CountFunc saw %v, want [%d]", got, tc.want)
			}
		})
	}
}

// A custom CountFunc: only 401s count, so a 500 gives its unit back.
func TestCountIfCustomFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		only401 := func(_ *http.Request, status int) bool { return status == http.StatusUnauthorized }
		m := mustNew(t, l, httplimit.WithLimits(loginLimit), httplimit.WithCountIf(only401))
		status := http.StatusInternalServerError
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		get(h, client, "/", nil)
		if got := remaining(t, m, client); got != 5 {
			t.Errorf("after a 500: %d remain, want 5", got)
		}
		status = http.StatusUnauthorized
		get(h, client, "/", nil)
		if got := remaining(t, m, client); got != 4 {
			t.Errorf("after a 401: %d remain, want 4", got)
		}
	})
}

// Every limit of the rule is reserved together and given back together.
func TestCountIfMultiLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(loginLimit, fixed(20, 24*time.Hour)), httplimit.WithCountIf(httplimit.Failed),
			httplimit.WithCost(func(*http.Request) (int64, error) { return 2, nil }))
		h := m.Handler(new(login))
		if w := get(h, client, "/?password=right", nil); w.Header().Get("RateLimit") != `"5/15m fixed_window";r=3;t=900, "20/1d fixed_window";r=18;t=86400` {
			t.Errorf("RateLimit %q", w.Header().Get("RateLimit"))
		}
		get(h, client, "/?password=wrong", nil)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = client
		info, err := m.Peek(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := info.Decision.Results[0].Remaining, info.Decision.Results[1].Remaining; a != 3 || b != 18 {
			t.Errorf("after a success and a failure of cost 2: %d and %d remain, want 3 and 18", a, b)
		}
	})
}

// A handler that panics counts, whatever the CountFunc says, and the
// panic reaches the caller.
func TestCountIfPanicCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(loginLimit), httplimit.WithCountIf(func(*http.Request, int) bool { return false }))
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("recovered %v, want the handler's panic", p)
				}
			}()
			get(h, client, "/", nil)
			t.Error("ServeHTTP returned; want the panic to go on")
		}()
		if got := remaining(t, m, client); got != 4 {
			t.Errorf("after a panic %d remain, want 4: it counts", got)
		}
	})
}

// Decide and DecideKey hold the reservation in the Verdict; Done settles
// it once.
func TestCountIfVerdictDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(loginLimit), httplimit.WithCountIf(httplimit.Failed))
		req := func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = client
			return r
		}
		for _, tc := range []struct {
			status int
			want   int64
		}{{200, 5}, {401, 4}, {0, 3}} {
			v := m.DecideKey(req(), "ip:198.51.100.7")
			if !v.Proceed {
				t.Fatalf("verdict %+v", v)
			}
			v.Done(tc.status)
			v.Done(200) // once only
			if got := remaining(t, m, client); got != tc.want {
				t.Errorf("Done(%d): %d remain, want %d", tc.status, got, tc.want)
			}
		}
		v := m.Decide(req())
		if v.Info.Decision.Results[0].Remaining != 2 {
			t.Errorf("Decide: remaining %d, want 2", v.Info.Decision.Results[0].Remaining)
		}
		v.Done(http.StatusNoContent)
		if got := remaining(t, m, client); got != 3 {
			t.Errorf("Decide, Done(204): %d remain, want 3", got)
		}
	})
}

// Check cannot see the handler end: under WithCountIf it answers with the
// error handler and consumes nothing, logging once.
func TestCheckRefusedUnderCountIf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		log, buf := newLogger()
		var errs []error
		m := mustNew(t, l, httplimit.WithLimits(loginLimit), httplimit.WithCountIf(httplimit.Failed), httplimit.WithLogger(log),
			httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
				errs = append(errs, err)
				httplimit.ProblemError(w, r, err)
			}))
		for range 2 {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if m.Check(w, r, "ann") || w.Code != http.StatusServiceUnavailable {
				t.Errorf("Check: status %d, want false and 503", w.Code)
			}
		}
		if len(errs) != 2 || !errors.Is(errs[0], ratewarden.ErrInvalidConfig) || !strings.Contains(errs[0].Error(), "DecideKey") {
			t.Errorf("errors %v, want two wrapping ErrInvalidConfig that point to DecideKey", errs)
		}
		if n := strings.Count(buf.String(), "Check cannot"); n != 1 {
			t.Errorf("logged %d times, want once:\n%s", n, buf)
		}
		info, err := m.PeekKey(context.Background(), "ann")
		if err != nil || info[0].Decision.Results[0].Remaining != 5 {
			t.Errorf("after refused Checks: %+v, %v; want 5 remaining", info, err)
		}
	})
}

// In shadow mode a request the reservation does not fit passes, and
// nothing is settled for it: it reserved nothing.
func TestCountIfShadow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, _ := newLimiter(t, 0)
		log, _ := newLogger()
		m := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Hour)), httplimit.WithCountIf(httplimit.Failed), httplimit.WithShadow(true), httplimit.WithLogger(log))
		h := m.Handler(new(login))
		for range 3 {
			if w := get(h, client, "/?password=wrong", nil); w.Code != http.StatusUnauthorized {
				t.Errorf("shadow: %d, want 401", w.Code)
			}
		}
		get(h, "203.0.113.9:1", "/?password=wrong", nil) // another client: 1 counted
		if got := remaining(t, m, client); got != 0 {
			t.Errorf("%d remain, want 0 (1 counted, 2 over the limit passed)", got)
		}
	})
}

func TestCountIfAndMaxInFlightOptionErrors(t *testing.T) {
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	good := httplimit.WithLimits(loginLimit)
	cases := []struct {
		name   string
		opt    httplimit.Option
		target error
		field  string
	}{
		{"nil count func", httplimit.WithCountIf(nil), ratewarden.ErrInvalidConfig, "WithCountIf"},
		{"max 0", httplimit.WithMaxInFlight(0, time.Minute), ratewarden.ErrInvalidLimit, "WithMaxInFlight: ratewarden: max permits"},
		{"max too big", httplimit.WithMaxInFlight(ratewarden.MaxPermits+1, time.Minute), ratewarden.ErrInvalidLimit, "WithMaxInFlight: ratewarden: max permits"},
		{"ttl 0", httplimit.WithMaxInFlight(4, 0), ratewarden.ErrInvalidLimit, "WithMaxInFlight: ratewarden: permit ttl"},
		{"ttl too long", httplimit.WithMaxInFlight(4, ratewarden.MaxPeriod+time.Millisecond), ratewarden.ErrInvalidLimit, "WithMaxInFlight: ratewarden: permit ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := httplimit.New(l, good, tc.opt)
			if m != nil || !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New = %v, %v; want an error wrapping %v naming %q", m, err, tc.target, tc.field)
			}
		})
	}
}
