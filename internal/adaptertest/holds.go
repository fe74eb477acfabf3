package adaptertest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// Logins is the limit of the login tests: 5 an hour, exact (a sliding
// log), nothing leaving its window during a test.
var Logins = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Hour}

// A HoldReplica serves GET /r through the framework, behind gl's
// recovery (a panic is answered 500) and then the adapter deciding with
// mw. Its route handler calls handle with the request's raw query and
// answers with the status handle returns in the framework's own way:
// below 400 as a plain response, from 400 up through the framework's
// error flow (gin: c.AbortWithStatus; echo: a returned *echo.HTTPError;
// fiber: a returned *fiber.Error). handle may block, or panic. It returns
// the base URL, and stops serving when the test ends.
type HoldReplica func(t *testing.T, mw *httplimit.Middleware, handle func(query string) int) (url string)

// handler is the route handler of the hold tests: "status=N" answers N,
// "panic=1" panics, "block=1" reports entered and waits for the gate to
// open.
type handler struct {
	entered chan struct{}
	ran     atomic.Int64
	mu      sync.Mutex
	gate    chan struct{}
	stopped bool // after a failure: nothing blocks any more
}

func newHandler() *handler {
	return &handler{entered: make(chan struct{}, 64), gate: make(chan struct{})}
}

func (h *handler) handle(query string) int {
	h.ran.Add(1)
	q, _ := url.ParseQuery(query)
	switch {
	case q.Get("panic") != "":
		panic("adaptertest: the handler panics, as asked")
	case q.Get("block") != "":
		h.mu.Lock()
		g, stopped := h.gate, h.stopped
		h.mu.Unlock()
		if !stopped {
			h.entered <- struct{}{}
			<-g
		}
	}
	if s, err := strconv.Atoi(q.Get("status")); err == nil {
		return s
	}
	return http.StatusOK
}

// open lets the blocked requests go on; later ones block again, unless
// stop is true.
func (h *handler) open(stop bool) {
	h.mu.Lock()
	close(h.gate)
	h.gate = make(chan struct{})
	h.stopped = h.stopped || stop
	h.mu.Unlock()
}

// CountIfLogins runs three replicas on one redis-server under
// httplimit.WithCountIf(httplimit.Failed) and Logins, beside an
// httplimit Handler twin on a redis-server of its own given the same
// requests: 20 successful logins consume nothing (every one reserved 1 of
// 5 and gave it back: X-RateLimit-Remaining 4), 5 failures (401 through
// the framework's error flow) are counted, and the 6th failure and any
// success after it are denied without the handler running. Every answer
// has httplimit's status and headers.
func CountIfLogins(t *testing.T, framework string, replica HoldReplica) {
	t.Helper()
	srv, twinSrv := testredis.Start(t), testredis.Start(t)
	h, twinH := newHandler(), newHandler()
	opts := []httplimit.Option{httplimit.WithLimits(Logins), httplimit.WithCountIf(httplimit.Failed)}
	var urls []string
	for range 3 {
		urls = append(urls, replica(t, Middleware(t, RedisLimiter(t, srv.Addr), opts...), h.handle))
	}
	twin := httptest.NewServer(Middleware(t, RedisLimiter(t, twinSrv.Addr), opts...).Handler(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(twinH.handle(r.URL.RawQuery)) })))
	t.Cleanup(twin.Close)
	c := Client(t)
	step := func(i int, query string, wantStatus int) Reply {
		t.Helper()
		got, want := Fetch(t, c, urls[i%3]+"/r?"+query), Fetch(t, c, twin.URL+"/r?"+query)
		if got.Status != wantStatus || want.Status != wantStatus {
			t.Fatalf("request %d (%s): %s %d, httplimit %d; want %d", i, query, framework, got.Status, want.Status, wantStatus)
		}
		SameHeaders(t, i, got.Header, want.Header)
		return got
	}
	for i := range 20 {
		if got := step(i, "status=200", http.StatusOK); got.Header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("success %d: X-RateLimit-Remaining %q; want 4: successes give their unit back", i, got.Header.Get("X-RateLimit-Remaining"))
		}
	}
	for i := range 5 {
		step(20+i, "status=401", http.StatusUnauthorized)
	}
	if h.ran.Load() != 25 {
		t.Fatalf("%s: the handler ran %d times for 25 admitted requests", framework, h.ran.Load())
	}
	step(25, "status=401", http.StatusTooManyRequests)
	step(26, "status=200", http.StatusTooManyRequests)
	if h.ran.Load() != 25 {
		t.Errorf("%s: the handler ran %d times; want 25: the denied ones must not reach it", framework, h.ran.Load())
	}
}

// MaxInFlight runs three replicas on one redis-server under
// httplimit.WithMaxInFlight(3, 30s): of 6 requests that block in the
// handler, exactly 3 enter it and 3 get 429 with Retry-After; once they
// end, a second wave of 3 blocking requests enters at once (each permit
// was released, not left to its ttl), and afterwards no permit of the
// key is held on Redis.
func MaxInFlight(t *testing.T, framework string, replica HoldReplica) {
	t.Helper()
	srv := testredis.Start(t)
	h := newHandler()
	var key atomic.Value
	ttl := 30 * time.Second
	var urls []string
	for range 3 {
		mw := Middleware(t, RedisLimiter(t, srv.Addr), httplimit.WithLimits(PerHour), httplimit.WithMaxInFlight(3, ttl),
			httplimit.WithOnLimit(func(_ *http.Request, info httplimit.Info) { key.Store(info.Key) }))
		urls = append(urls, replica(t, mw, h.handle))
	}
	c := Client(t)
	wave := func(n int) map[int]int {
		t.Helper()
		replies := make(chan Reply, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { replies <- get(c, urls[i%3]+"/r?block=1") })
		}
		defer wg.Wait()
		codes := map[int]int{}
		entered, deadline := 0, time.After(time.Minute)
		for entered < min(n, 3) || codes[http.StatusTooManyRequests] < n-3 {
			select {
			case <-h.entered:
				entered++
			case r := <-replies:
				codes[r.Status]++
				if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || codes[r.Status] > n-3 {
					h.open(true)
					t.Fatalf("%s: %d of %d requests answered %d (Retry-After %q) while %d were in the handler; want 429 with Retry-After for the %d over 3 in flight", framework, codes[r.Status], n, r.Status, r.Header.Get("Retry-After"), entered, max(n-3, 0))
				}
			case <-deadline:
				h.open(true)
				t.Fatalf("%s: after a minute %d requests are in the handler and %v answered; want 3 in, the rest 429", framework, entered, codes)
			}
		}
		if len(h.entered) != 0 {
			t.Errorf("%s: a 4th request entered the handler with 3 in flight", framework)
		}
		h.open(false)
		for range n - codes[http.StatusTooManyRequests] {
			codes[(<-replies).Status]++
		}
		return codes
	}
	if codes := wave(6); codes[200] != 3 || codes[429] != 3 {
		t.Errorf("%s: first wave %v; want 3 served, 3 denied", framework, codes)
	}
	if codes := wave(3); codes[200] != 3 {
		t.Errorf("%s: second wave %v; want all 3 served: the first wave's permits must be released", framework, codes)
	}
	k, _ := key.Load().(string)
	if k == "" {
		t.Fatalf("%s: no denial reported its key", framework)
	}
	lim := RedisLimiter(t, srv.Addr)
	p, err := lim.Acquire(context.Background(), k, 3, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Release(context.Background()) }()
	if !p.Acquired || p.Held != 1 {
		t.Errorf("%s: after every request ended, a permit of %q acquired %v with %d held; want 1: nothing left held", framework, k, p.Acquired, p.Held)
	}
}

// PanicCounts runs three replicas on one redis-server under
// httplimit.WithCountIf(httplimit.Failed), Logins and
// httplimit.WithMaxInFlight(1, 30s): a handler that panics is answered
// 500 by the framework's recovery (the panic went on through the
// adapter), counts against the limit, and releases its permit, so the
// successful request after it is served at once, with one unit less
// remaining; the 5th panic exhausts the limit.
func PanicCounts(t *testing.T, framework string, replica HoldReplica) {
	t.Helper()
	srv := testredis.Start(t)
	h := newHandler()
	var urls []string
	for range 3 {
		urls = append(urls, replica(t, Middleware(t, RedisLimiter(t, srv.Addr), httplimit.WithLimits(Logins),
			httplimit.WithCountIf(httplimit.Failed), httplimit.WithMaxInFlight(1, 30*time.Second)), h.handle))
	}
	c := Client(t)
	for i := range 5 {
		if r := Fetch(t, c, urls[i%3]+"/r?panic=1"); r.Status != http.StatusInternalServerError {
			t.Fatalf("%s: panic %d answered %d; want 500 from the framework's recovery", framework, i+1, r.Status)
		}
		r := Fetch(t, c, urls[(i+1)%3]+"/r?status=200")
		switch {
		case i < 4 && (r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(3-i)):
			t.Fatalf("%s: the success after panic %d: %d, X-RateLimit-Remaining %q; want 200 and %d (each panic counted, its permit released)", framework, i+1, r.Status, r.Header.Get("X-RateLimit-Remaining"), 3-i)
		case i == 4 && r.Status != http.StatusTooManyRequests:
			t.Fatalf("%s: the request after 5 panics: %d; want 429", framework, r.Status)
		}
	}
	if h.ran.Load() != 9 {
		t.Errorf("%s: the handler ran %d times; want 9 (5 panics, 4 successes)", framework, h.ran.Load())
	}
}

// get is Fetch for another goroutine: an error is a reply of status 0.
func get(c *http.Client, u string) Reply {
	resp, err := c.Get(u)
	if err != nil {
		return Reply{Body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{resp.StatusCode, resp.Header, string(b)}
}

// CheckSettled runs the scenario of a handler-level Check counted by
// outcome (httplimit.Failed, 5 failures per user): login(user, password)
// answers one login's status. 10 successes consume nothing, 5 failures
// (401) are counted, and then that user is denied (429) whatever the
// password while another user still logs in.
func CheckSettled(t *testing.T, login func(user, password string) int) {
	t.Helper()
	for i := range 10 {
		if code := login("ann", "good"); code != http.StatusOK {
			t.Fatalf("success %d: %d; want 200", i, code)
		}
	}
	for i := range 5 {
		if code := login("ann", "bad"); code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d; want 401", i, code)
		}
	}
	for _, pass := range []string{"bad", "good"} {
		if code := login("ann", pass); code != http.StatusTooManyRequests {
			t.Errorf("ann after 5 failures, password %q: %d; want 429", pass, code)
		}
	}
	if code := login("bob", "good"); code != http.StatusOK {
		t.Errorf("bob: %d; want 200", code)
	}
}
