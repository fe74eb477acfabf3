package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
)

// gate is a handler that blocks each request until the test lets one go,
// counting the requests inside it.
type gate struct {
	release chan struct{}
	mu      sync.Mutex
	in, max int
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.in++
	g.max = max(g.max, g.in)
	g.mu.Unlock()
	<-g.release
	g.mu.Lock()
	g.in--
	g.mu.Unlock()
}

// most is the largest number of requests that were in the handler at
// once.
func (g *gate) most() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max
}

func (g *gate) inside() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.in
}

// held is the number of permits of key held in st, found by trying to
// take max more (and giving them back).
func held(t *testing.T, st *memstore.Store, key string, max int64) int64 {
	t.Helper()
	var got []string
	for i := range max {
		holder := "probe-" + strings.Repeat("x", int(i)+1)
		pr, err := st.Acquire(context.Background(), key, holder, max, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !pr.Acquired {
			break
		}
		got = append(got, holder)
	}
	for _, h := range got {
		if _, err := st.Release(context.Background(), key, h); err != nil {
			t.Fatal(err)
		}
	}
	return max - int64(len(got))
}

// At most max requests of a key in flight: the next one gets 429 with
// Retry-After and a problem of its own, without reaching the handler or
// the rate limits; a request that ends lets the next one in.
func TestMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		var infos []httplimit.Info
		m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithMaxInFlight(2, 10*time.Second),
			httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) { infos = append(infos, i) }))
		g := newGate()
		h := m.Handler(g)
		codes := make(chan int, 3)
		for range 2 {
			go func() { codes <- get(h, client, "/", nil).Code }()
		}
		synctest.Wait()
		time.Sleep(2500 * time.Millisecond) // the permits expire in 7.5 s
		w := get(h, client, "/", nil)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "8" {
			t.Errorf("third request: %d, Retry-After %q; want 429 and 8 (the soonest permit expires in 7.5 s)", w.Code, w.Header().Get("Retry-After"))
		}
		for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining"} {
			if v := w.Header().Get(name); v != "" {
				t.Errorf("%s = %q on an in-flight denial; the rate limits did not decide it", name, v)
			}
		}
		var p httplimit.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		want := httplimit.Problem{Type: "about:blank", Title: "Too Many Requests", Status: 429,
			Detail: "Too many requests in flight: at most 2 at once; retry in 8 s.", RetryAfter: 8, MaxInFlight: 2}
		if !equalProblem(p, want) {
			t.Errorf("problem %+v, want %+v", p, want)
		}
		if len(infos) != 1 || !infos[0].InFlight.Denied() || infos[0].InFlight.Held != 2 || len(infos[0].Decision.Results) != 0 || infos[0].Key != "default|ip:198.51.100.7" {
			t.Errorf("OnLimit got %+v", infos)
		}
		if g.inside() != 2 {
			t.Errorf("%d in the handler, want 2", g.inside())
		}
		if got := remaining(t, m, client); got != 98 {
			t.Errorf("%d remain, want 98: the denied request consumes nothing", got)
		}
		// Another client has permits of its own.
		go func() { codes <- get(h, "203.0.113.9:1", "/", nil).Code }()
		synctest.Wait()
		if g.inside() != 3 {
			t.Errorf("another client: %d in the handler, want 3", g.inside())
		}
		g.release <- struct{}{}
		if c := <-codes; c != http.StatusOK {
			t.Errorf("a request let go: %d", c)
		}
		synctest.Wait()
		go func() { codes <- get(h, client, "/", nil).Code }()
		synctest.Wait()
		if g.inside() != 2 && g.inside() != 3 {
			t.Errorf("%d in the handler", g.inside())
		}
		close(g.release)
		for range 3 {
			if c := <-codes; c != http.StatusOK {
				t.Errorf("status %d, want 200", c)
			}
		}
		if n := held(t, st, "default|ip:198.51.100.7", 2); n != 0 {
			t.Errorf("%d permits held after every request ended, want 0", n)
		}
	})
}

func equalProblem(a, b httplimit.Problem) bool {
	return a.Type == b.Type && a.Title == b.Title && a.Status == b.Status && a.Detail == b.Detail &&
		a.RetryAfter == b.RetryAfter && a.MaxInFlight == b.MaxInFlight && len(a.ViolatedPolicies) == len(b.ViolatedPolicies)
}

// A request longer than ttl keeps its permit: the middleware extends it
// while the handler runs, and stops when it returns.
func TestMaxInFlightExtendsLongRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithMaxInFlight(1, 2*time.Second))
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(time.Minute) }))
		done := make(chan int)
		go func() { done <- get(h, client, "/", nil).Code }()
		for range 29 {
			time.Sleep(2 * time.Second)
			at := time.Since(epoch)
			if w := get(h, client, "/", nil); w.Code != http.StatusTooManyRequests {
				t.Fatalf("%v into a 1-minute request with a 2 s ttl: %d, want 429", at, w.Code)
			}
		}
		if c := <-done; c != http.StatusOK {
			t.Errorf("the long request: %d", c)
		}
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held after the long request, want 0", n)
		}
		// No timer is left extending: the bubble has no goroutine left
		// but this one, and after more than a ttl nothing is held.
		time.Sleep(time.Minute)
		if w := get(h, client, "/", nil); w.Code != http.StatusOK {
			t.Errorf("after the long request: %d, want 200", w.Code)
		}
	})
}

// A handler that panics gives its permit back, and the panic goes on.
func TestMaxInFlightPanicReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithMaxInFlight(1, time.Minute))
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
		func() {
			defer func() {
				if p := recover(); p != http.ErrAbortHandler {
					t.Errorf("recovered %v, want the handler's panic", p)
				}
			}()
			get(h, client, "/", nil)
		}()
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held after a panic, want 0", n)
		}
	})
}

// A request the rate limits deny gives its permit back at once.
func TestMaxInFlightRateDenialReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Hour)), httplimit.WithMaxInFlight(1, time.Minute))
		h := m.Handler(new(ok))
		get(h, client, "/", nil)
		w := get(h, client, "/", nil)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("RateLimit") == "" || w.Header().Get("Retry-After") != "3600" {
			t.Errorf("over the rate limit: %d %v", w.Code, w.Header())
		}
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held after a rate denial, want 0", n)
		}
	})
}

// Shadow mode: a request over the cap passes, is reported once (with the
// rate limits' decision), and holds no permit.
func TestMaxInFlightShadow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		log, buf := newLogger()
		var infos []httplimit.Info
		m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithMaxInFlight(1, time.Minute), httplimit.WithShadow(true),
			httplimit.WithLogger(log), httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) { infos = append(infos, i) }))
		g := newGate()
		h := m.Handler(g)
		codes := make(chan int, 2)
		for range 2 {
			go func() { codes <- get(h, client, "/", nil).Code }()
		}
		synctest.Wait()
		if g.inside() != 2 || len(infos) != 1 || !infos[0].Shadow || !infos[0].InFlight.Denied() || len(infos[0].Decision.Results) != 1 {
			t.Errorf("%d inside, reports %+v; want 2 and one shadow report with the rate decision", g.inside(), infos)
		}
		if !strings.Contains(buf.String(), "max_in_flight=1") {
			t.Errorf("shadow log %q", buf)
		}
		close(g.release)
		<-codes
		<-codes
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held, want 0", n)
		}
	})
}

// A store that fails: by default the request goes on, uncapped, and the
// failure is logged; WithFailClosed answers 503.
func TestMaxInFlightStoreFailure(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[closed], func(t *testing.T) {
			st, err := memstore.New()
			if err != nil {
				t.Fatal(err)
			}
			_ = st.Close() // every call fails with ErrStoreUnavailable
			l, err := ratewarden.New(st)
			if err != nil {
				t.Fatal(err)
			}
			log, buf := newLogger()
			next := new(ok)
			h := mustNew(t, l, httplimit.WithLimits(fixed(1, time.Hour)), httplimit.WithMaxInFlight(1, time.Minute),
				httplimit.WithFailClosed(closed), httplimit.WithLogger(log)).Handler(next)
			w := get(h, client, "/", nil)
			want := map[bool]int{false: 200, true: 503}[closed]
			if w.Code != want || !strings.Contains(buf.String(), "rate limit store failed") {
				t.Errorf("status %d (want %d), log %q", w.Code, want, buf)
			}
			if closed && next.calls() != 0 {
				t.Errorf("fail closed: the handler ran")
			}
		})
	}
}

// Decide holds the permit in the Verdict until Done; a Verdict never Done
// stops being extended once the request's context ends, and is not
// extended on a context that cannot end.
func TestMaxInFlightVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithMaxInFlight(1, 2*time.Second))
		req := func(ctx context.Context) *http.Request {
			r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
			r.RemoteAddr = client
			return r
		}
		live, end := context.WithCancel(context.Background())
		defer end()
		v := m.Decide(req(live))
		if !v.Proceed || !v.Info.InFlight.Acquired || v.Info.InFlight.Held != 1 {
			t.Fatalf("first verdict %+v", v)
		}
		time.Sleep(10500 * time.Millisecond) // extended meanwhile, last at 10 s: it expires at 12 s
		v2 := m.Decide(req(context.Background()))
		if !v2.Rejected() || !v2.Info.InFlight.Denied() {
			t.Fatalf("second verdict %+v, want rejected over the cap", v2)
		}
		h := http.Header{}
		v2.SetHeaders(h)
		if f := v2.AppendFields(nil); h.Get("Retry-After") != "2" || len(f) != 1 || f[0].Name != "Retry-After" || f[0].Value != "2" {
			t.Errorf("headers %v, fields %v; want Retry-After 2 alone", h, f)
		}
		v2.Done(200) // nothing held: nothing happens
		v.Done(200)
		v.Done(200)
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held after Done, want 0", n)
		}
		// Never Done: the permit lasts until ttl after the context ends.
		ctx, cancel := context.WithCancel(context.Background())
		if v := m.Decide(req(ctx)); !v.Proceed {
			t.Fatalf("third verdict %+v", v)
		}
		time.Sleep(5 * time.Second)
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 1 {
			t.Errorf("%d permits held while the request's context lives, want 1", n)
		}
		cancel()
		time.Sleep(2 * time.Second)
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held ttl after the context ended, want 0", n)
		}
		// A context that can never end: not extended, held ttl at most.
		if v := m.Decide(req(context.Background())); !v.Proceed {
			t.Fatalf("fourth verdict %+v", v)
		}
		time.Sleep(2 * time.Second)
		if n := held(t, st, "default|ip:198.51.100.7", 1); n != 0 {
			t.Errorf("%d permits held ttl after a Verdict on context.Background, want 0", n)
		}
	})
}

// DoneAfter ends a Verdict when its context ends (its permit released
// then, well before the ttl, and its reservation counted), at once on a
// context that can never end, and not twice after Done.
func TestVerdictDoneAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, st := newLimiter(t, 0)
		m := mustNew(t, l, httplimit.WithLimits(fixed(2, time.Hour)), httplimit.WithCountIf(httplimit.Failed),
			httplimit.WithMaxInFlight(1, time.Hour))
		const key = "default|ip:198.51.100.7"
		req := func(ctx context.Context) *http.Request {
			r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
			r.RemoteAddr = client
			return r
		}
		ctx, cancel := context.WithCancel(context.Background())
		v := m.Decide(req(ctx))
		if !v.Proceed || !v.Info.InFlight.Acquired {
			t.Fatalf("verdict %+v", v)
		}
		v.DoneAfter(ctx)
		synctest.Wait()
		if n := held(t, st, key, 1); n != 1 {
			t.Errorf("%d permits held while the context lives, want 1", n)
		}
		cancel()
		synctest.Wait()
		if n := held(t, st, key, 1); n != 0 {
			t.Errorf("%d permits held once the context ended, want 0", n)
		}
		v.Done(200) // ended already: the unit stays counted
		v = m.Decide(req(context.Background()))
		if !v.Proceed || !v.Info.InFlight.Acquired {
			t.Fatalf("verdict on context.Background %+v", v)
		}
		v.DoneAfter(context.Background())
		if n := held(t, st, key, 1); n != 0 {
			t.Errorf("%d permits held after DoneAfter(context.Background()), want 0", n)
		}
		// Both requests counted (status 0): the limit of 2 is spent.
		if v := m.Decide(req(context.Background())); !v.Rejected() {
			t.Errorf("third verdict %+v, want rejected: DoneAfter must count both", v)
		}
		httplimit.Verdict{}.DoneAfter(context.Background()) // holds nothing: nothing happens
	})
}

// Check cannot hold a permit past its own return: refused.
func TestCheckRefusedUnderMaxInFlight(t *testing.T) {
	l, err := ratewarden.New(mustMemstore(t))
	if err != nil {
		t.Fatal(err)
	}
	log, _ := newLogger()
	var got error
	m := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Hour)), httplimit.WithMaxInFlight(1, time.Minute), httplimit.WithLogger(log),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) { got = err; w.WriteHeader(599) }))
	w := httptest.NewRecorder()
	if m.Check(w, httptest.NewRequest(http.MethodGet, "/", nil), "ann") || w.Code != 599 || !errors.Is(got, ratewarden.ErrInvalidConfig) {
		t.Errorf("Check: status %d, error %v; want false, the error handler and ErrInvalidConfig", w.Code, got)
	}
}

// With the store wrapped by a failure policy (package fallback), an outage
// answers permits by the policy: its permits are honoured like degraded
// results, and their Source shows in Info.InFlight.
func TestMaxInFlightDegradedPermits(t *testing.T) {
	cases := []struct {
		policy fallback.Policy
		codes  []int // 3 requests held in flight at once
		source ratewarden.Source
	}{
		{fallback.FailOpen, []int{200, 200, 200}, ratewarden.SourceFailOpen},
		{fallback.FailClosed, []int{429, 429, 429}, ratewarden.SourceFailClosed},
		// This replica's share of 4 in flight across 2 replicas: 2.
		{fallback.LocalFallback, []int{200, 200, 429}, ratewarden.SourceLocalFallback},
	}
	for _, tc := range cases {
		t.Run(tc.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, log := outageLimiter(t, tc.policy)
				var sources []ratewarden.Source
				var mu sync.Mutex
				g := newGate()
				// A rate limit FailClosed cannot deny before the permit is
				// asked for: the permit is asked first.
				h := mustNew(t, l, httplimit.WithLimits(fixed(100, time.Minute)), httplimit.WithMaxInFlight(4, time.Minute), httplimit.WithLogger(log),
					httplimit.WithOnLimit(func(_ *http.Request, i httplimit.Info) {
						mu.Lock()
						sources = append(sources, i.InFlight.Source)
						mu.Unlock()
					})).Handler(g)
				codes := make(chan int, 3)
				for range 3 {
					go func() { codes <- get(h, client, "/", nil).Code }()
					synctest.Wait()
				}
				var got []int
				for range len(codes) {
					got = append(got, <-codes)
				}
				close(g.release)
				for range 3 - len(got) {
					got = append(got, <-codes)
				}
				slices.Sort(got)
				if !equalInts(got, tc.codes) {
					t.Errorf("codes %v, want %v", got, tc.codes)
				}
				for _, s := range sources {
					if s != tc.source {
						t.Errorf("a denial's permit came from %v, want %v", s, tc.source)
					}
				}
				if denied := slices.Index(tc.codes, 429) >= 0; denied != (len(sources) > 0) {
					t.Errorf("%d denials reported", len(sources))
				}
				if tc.policy == fallback.FailClosed {
					if w := get(h, client, "/", nil); w.Header().Get("Retry-After") != "7" {
						t.Errorf("Retry-After %q, want the policy's 7", w.Header().Get("Retry-After"))
					}
				}
			})
		})
	}
}
