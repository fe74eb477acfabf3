package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/stack"
)

// Acceptance 4 of issue 17 (login protection by outcome) and the
// in-flight cap, on 3 replicas of a service that share one real
// redis-server: each replica has its own Redis client, recommended stack
// (stack.New), Limiter and Middleware, behind its own HTTP server, and the
// test's requests go to the replicas in turn.

// cluster3 is the replicas of one test.
type cluster3 struct {
	urls     []string
	mws      []*httplimit.Middleware
	client   *http.Client
	next     atomic.Uint64
	degraded atomic.Int64 // results a failure policy gave (none expected)
}

// startReplicas starts 3 replicas of handler on the redis-server at addr,
// each behind a Middleware built with opts.
func startReplicas(t *testing.T, addr string, handler http.Handler, opts ...httplimit.Option) *cluster3 {
	t.Helper()
	c := &cluster3{}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	// A cap for a hung request, far above what one takes on a busy machine.
	c.client = &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	for range 3 {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		// A deadline a healthy call meets on a busy machine, so that no
		// answer is the failure policy's by accident.
		st, err := stack.New(rc, stack.WithFallback(fallback.WithTimeout(10*time.Second), fallback.WithLogger(slog.New(slog.DiscardHandler))))
		if err != nil {
			t.Fatal(err)
		}
		l, err := ratewarden.New(st, ratewarden.WithObserver(func(_ string, res []ratewarden.Result, _ error) {
			for _, r := range res {
				if r.Degraded() {
					c.degraded.Add(1)
				}
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		m := mustNew(t, l, opts...)
		srv := httptest.NewServer(m.Handler(handler))
		t.Cleanup(srv.Close)
		c.urls = append(c.urls, srv.URL)
		c.mws = append(c.mws, m)
	}
	t.Cleanup(func() {
		if n := c.degraded.Load(); n != 0 {
			t.Errorf("%d results came from the failure policy, not Redis: the counts above are not Redis'", n)
		}
	})
	return c
}

type reply struct {
	status int
	header http.Header
	body   string
}

// post sends a POST of form to the next replica in turn.
func (c *cluster3) post(t *testing.T, form url.Values) reply {
	u := c.urls[(c.next.Add(1)-1)%3]
	resp, err := c.client.PostForm(u+"/login", form)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func (c *cluster3) get(t *testing.T) reply {
	u := c.urls[(c.next.Add(1)-1)%3]
	resp, err := c.client.Get(u + "/report")
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// loginHandler answers 200 to the password "right" and 401 to any other,
// counting its calls; when hold is not nil, each successful login waits
// on it first.
type loginHandler struct {
	calls atomic.Int64
	hold  chan struct{}
}

func (h *loginHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	if r.PostFormValue("password") != "right" {
		http.Error(w, "wrong user or password", http.StatusUnauthorized)
		return
	}
	if h.hold != nil {
		<-h.hold
	}
	_, _ = io.WriteString(w, "welcome")
}

// formUser keys a login by the user it names (the key function reads the
// form; the handler reads it again).
func formUser(r *http.Request) (string, error) {
	u := r.PostFormValue("user")
	if u == "" {
		return "", fmt.Errorf("no user: %w", ratewarden.ErrInvalidKey)
	}
	return "user:" + u, nil
}

func loginOptions(limit ratewarden.Limit) []httplimit.Option {
	return []httplimit.Option{
		httplimit.WithPolicies(httplimit.Policy{Name: "failed-logins", Limit: limit}),
		httplimit.WithKey(formUser),
		httplimit.WithCountIf(httplimit.Failed),
	}
}

func attempt(user, password string) url.Values {
	return url.Values{"user": {user}, "password": {password}}
}

// failedPerHour is the login limit of the exact tests: 5 failures an
// hour. A sliding log is exact and has no window edge a slow machine
// could cross between two requests.
var failedPerHour = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Hour}

// 20 successful logins consume nothing, 5 failures use the allowance up,
// and the sixth attempt is denied whatever its password, without reaching
// the handler: exactly, although the requests go to 3 replicas in turn.
func TestAcceptanceLoginByOutcomeAcrossReplicas(t *testing.T) {
	srv := testredis.Start(t)
	h := new(loginHandler)
	c := startReplicas(t, srv.Addr, h, loginOptions(failedPerHour)...)
	for i := range 20 {
		// Each shows the reservation's decision; the success before it
		// gave its unit back before its response was sent.
		if r := c.post(t, attempt("ann", "right")); r.status != 200 || r.header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("success %d: %d, remaining %q; want 200 and 4", i, r.status, r.header.Get("X-RateLimit-Remaining"))
		}
	}
	for i := range 5 {
		if r := c.post(t, attempt("ann", "wrong")); r.status != 401 || r.header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) {
			t.Fatalf("failure %d: %d, remaining %q; want 401 and %d", i, r.status, r.header.Get("X-RateLimit-Remaining"), 4-i)
		}
	}
	for _, pw := range []string{"wrong", "right", "wrong"} {
		r := c.post(t, attempt("ann", pw))
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		// The oldest failure leaves the hour in just under an hour; a
		// stalled machine may have taken a few minutes to get here.
		if r.status != 429 || ra < 3000 || ra > 3600 || !strings.Contains(r.body, `"violated-policies":["failed-logins"]`) {
			t.Errorf("password %s after 5 failures: %d, Retry-After %q, body %s; want 429, just under 3600 s, failed-logins", pw, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	if n := h.calls.Load(); n != 25 {
		t.Errorf("the handler ran %d times, want 25: denied attempts must not reach it", n)
	}
	// Another user has an allowance of its own.
	if r := c.post(t, attempt("bob", "wrong")); r.status != 401 || r.header.Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("another user: %d, remaining %q", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	// Every key in Redis expires.
	keys, err := srv.Do("KEYS", "*")
	if err != nil || !strings.Contains(keys, "user:ann") {
		t.Fatalf("keys %q, %v", keys, err)
	}
	for _, k := range strings.Split(keys, "\n") {
		if ttl, err := srv.Do("PTTL", k); err != nil || ttl == "-1" || ttl == "-2" {
			t.Errorf("PTTL %s = %s, %v", k, ttl, err)
		}
	}
}

// Concurrency across replicas. Exact means: of n concurrent attempts
// against a limit of 5, exactly 5 reach the handler and n−5 are denied
// with 429, whichever replicas they land on; attempts in flight count
// until they end, so this holds for successes too, which give their units
// back once they have ended (then the full allowance is there again).
func TestAcceptanceLoginConcurrentAcrossReplicas(t *testing.T) {
	srv := testredis.Start(t)
	h := &loginHandler{hold: make(chan struct{})}
	c := startReplicas(t, srv.Addr, h, loginOptions(failedPerHour)...)

	t.Run("30 failures", func(t *testing.T) {
		h.calls.Store(0)
		counts := concurrently(t, 30, func() reply { return c.post(t, attempt("cy", "wrong")) }, 30)
		if counts[401] != 5 || counts[429] != 25 || h.calls.Load() != 5 {
			t.Errorf("statuses %v, handler calls %d; want exactly 5 × 401, 25 × 429 and 5 calls", counts, h.calls.Load())
		}
	})
	t.Run("30 successes in flight", func(t *testing.T) {
		h.calls.Store(0)
		answers := make(chan reply, 30)
		for range 30 {
			go func() { answers <- c.post(t, attempt("dee", "right")) }()
		}
		// The 25 denials come back while 5 successes wait in the handler.
		counts := collect(t, answers, 25)
		waitCalls(t, &h.calls, 5)
		if counts[429] != 25 || h.calls.Load() != 5 {
			t.Errorf("while 5 were in flight: statuses %v and %d in the handler; want 25 × 429 and 5", counts, h.calls.Load())
		}
		close(h.hold)
		if counts := collect(t, answers, 5); counts[200] != 5 {
			t.Errorf("the 5 in flight: %v, want 5 × 200", counts)
		}
		infos, err := c.mws[0].PeekKey(context.Background(), "user:dee")
		if err != nil || infos[0].Decision.Results[0].Remaining != 5 {
			t.Errorf("after the 5 successes ended: %+v, %v; want all 5 given back", infos, err)
		}
	})
}

// concurrently runs do n times at once and counts the statuses of the
// first want answers.
func concurrently(t *testing.T, n int, do func() reply, want int) map[int]int {
	answers := make(chan reply, n)
	for range n {
		go func() { answers <- do() }()
	}
	return collect(t, answers, want)
}

// collect counts the statuses of n answers; a minute without one fails
// the test (a bound for a stalled machine, far above what a request
// takes).
func collect(t *testing.T, answers <-chan reply, n int) map[int]int {
	t.Helper()
	counts := map[int]int{}
	for i := range n {
		select {
		case r := <-answers:
			counts[r.status]++
		case <-time.After(time.Minute):
			t.Fatalf("answer %d of %d: none for a minute (got %v)", i+1, n, counts)
		}
	}
	return counts
}

// The sixth failure is blocked for the window and admitted once it has
// passed: on a 4-second sliding log, it is denied, and admitted after its
// Retry-After. A run in which the machine took longer than 3 s for the 6
// attempts cannot tell (the first failure may have left the window) and
// is repeated with another user, up to 3 times.
func TestAcceptanceLoginBlockedForTheWindow(t *testing.T) {
	srv := testredis.Start(t)
	period := 4 * time.Second
	c := startReplicas(t, srv.Addr, new(loginHandler), loginOptions(ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: period})...)
	for run := range 3 {
		user := "eve" + strconv.Itoa(run)
		start := time.Now()
		for range 5 {
			if r := c.post(t, attempt(user, "wrong")); r.status != 401 {
				t.Fatalf("failure: %d", r.status)
			}
		}
		sixth := c.post(t, attempt(user, "right"))
		if elapsed := time.Since(start); elapsed > period-time.Second {
			t.Logf("run %d: the 6 attempts took %v, too close to the %v window to tell; again", run, elapsed, period)
			continue
		}
		ra, err := strconv.Atoi(sixth.header.Get("Retry-After"))
		if sixth.status != 429 || err != nil || ra < 1 || ra > 4 {
			t.Fatalf("sixth attempt within the window: %d, Retry-After %q; want 429 and 1..4 s", sixth.status, sixth.header.Get("Retry-After"))
		}
		time.Sleep(time.Duration(ra) * time.Second)
		if r := c.post(t, attempt(user, "right")); r.status != 200 {
			t.Errorf("after Retry-After (%d s): %d, want 200", ra, r.status)
		}
		return
	}
	t.Fatal("3 runs of 6 attempts each took longer than 3 s: the machine is too slow to tell a window of 4 s")
}

// MaxInFlight across 3 replicas on one Redis: with a cap of 4 and a
// handler that waits until the test lets a request go, exactly 4 are in
// flight, the fifth gets 429, and a request that ends admits the next.
func TestAcceptanceMaxInFlightAcrossReplicas(t *testing.T) {
	srv := testredis.Start(t)
	ttl := 30 * time.Second
	g := newGate()
	c := startReplicas(t, srv.Addr, g, httplimit.WithLimits(fixed(1000, time.Hour)), httplimit.WithMaxInFlight(4, ttl))
	answers := make(chan reply, 64)
	goGet := func() { go func() { answers <- c.get(t) }() }

	for range 4 {
		goGet()
	}
	waitInside(t, g, 4)
	fifth := c.get(t)
	var p httplimit.Problem
	_ = json.Unmarshal([]byte(fifth.body), &p)
	ra, _ := strconv.Atoi(fifth.header.Get("Retry-After"))
	if fifth.status != 429 || ra < 1 || ra > 30 || p.MaxInFlight != 4 {
		t.Errorf("fifth request: %d, Retry-After %q, problem %+v; want 429, 1..30 and max-in-flight 4", fifth.status, fifth.header.Get("Retry-After"), p)
	}
	g.release <- struct{}{}
	if r := <-answers; r.status != 200 {
		t.Errorf("a request let go: %d", r.status)
	}
	goGet()
	waitInside(t, g, 4)
	if r := c.get(t); r.status != 429 {
		t.Errorf("at 4 in flight again: %d, want 429", r.status)
	}
	for range 4 {
		g.release <- struct{}{}
	}
	if counts := collect(t, answers, 4); counts[200] != 4 {
		t.Errorf("the 4 in flight: %v", counts)
	}

	// 20 at once: exactly 4 get in, 16 are denied, wherever they land.
	for range 20 {
		goGet()
	}
	counts := collect(t, answers, 16)
	waitInside(t, g, 4)
	if counts[429] != 16 {
		t.Errorf("20 at once: %v; want 16 × 429 while 4 are in flight", counts)
	}
	close(g.release)
	if counts := collect(t, answers, 4); counts[200] != 4 {
		t.Errorf("the 4 in flight: %v", counts)
	}
	if m := g.most(); m != 4 {
		t.Errorf("at most %d in the handler at once, want 4", m)
	}
	// Every permit was given back (before each answer was sent): a new one
	// is the only one held.
	l, err := ratewarden.New(newRedisStore(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := l.Acquire(context.Background(), "default|ip:127.0.0.1", 4, ttl)
	if err != nil || !pm.Acquired || pm.Held != 1 {
		t.Errorf("a permit after every request ended: %+v, %v; want it alone held", pm, err)
	}
}

// waitCalls waits until n is at least want; a minute without that fails
// the test (a bound for a stalled machine).
func waitCalls(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls after a minute, want %d", n.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitInside waits until n requests are in g's handler; a minute without
// that fails the test (a bound for a stalled machine).
func waitInside(t *testing.T, g *gate, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for g.inside() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in the handler after a minute, want %d", g.inside(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
