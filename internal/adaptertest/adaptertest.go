// Package adaptertest is the one test harness of the HTTP framework
// adapters (adapters/ginlimit, echolimit, fiberlimit): every adapter must
// count exactly what httplimit counts across replicas that share a Redis,
// and answer with httplimit's headers and problem body. An adapter's test
// supplies a replica; the harness drives three of them and a plain
// httplimit twin and compares every answer. For tests only.
package adaptertest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
)

// PerHour is the limit the harness uses: exact (a sliding log), and
// nothing leaves its window during a test.
var PerHour = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 10, Period: time.Hour}

// RedisLimiter returns a Limiter on a redisstore with a client of its own
// for addr, closed when the test ends.
func RedisLimiter(t testing.TB, addr string) *ratewarden.Limiter {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return limiter(t, st)
}

// MemLimiter returns a Limiter on a memstore closed when the test ends.
func MemLimiter(t testing.TB) *ratewarden.Limiter {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return limiter(t, st)
}

// StillLimiter returns a Limiter on a memstore whose clock stands still
// (at 2026-03-01 12:00:20 UTC), for the adapters' examples: their output
// does not depend on when they run. It panics if the Limiter cannot be
// made; a real service uses redisstore.
func StillLimiter() *ratewarden.Limiter {
	at := time.Date(2026, 3, 1, 12, 0, 20, 0, time.UTC)
	st, err := memstore.New(memstore.WithClock(func() time.Time { return at }))
	if err != nil {
		panic(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		panic(err)
	}
	return lim
}

func limiter(t testing.TB, st ratewarden.Store) *ratewarden.Limiter {
	t.Helper()
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Middleware returns httplimit.New(l, opts...) or fails the test.
func Middleware(t testing.TB, l *ratewarden.Limiter, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Reply is an HTTP answer, read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Fetch GETs u and reads the answer.
func Fetch(t testing.TB, c *http.Client, u string) Reply {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{resp.StatusCode, resp.Header, string(b)}
}

// Serve runs one request through h in memory and returns the recorded
// answer; a body is sent as a form (application/x-www-form-urlencoded).
func Serve(h http.Handler, method, target string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	if body != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Client is an HTTP client whose idle connections close when the test
// ends.
func Client(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// A Replica serves GET /items/:id through the framework, deciding with mw;
// its route handler calls served once per request it runs and answers
// "item <id>". It returns the base URL, and stops serving when the test
// ends.
type Replica func(t *testing.T, mw *httplimit.Middleware, served func()) (url string)

// ReplicasShareOneRedis runs three replicas, each with its own Redis
// client, on one redis-server, under PerHour: 30 requests must admit
// exactly 10 in total, each answer must carry the status and the rate
// limit headers that httplimit's Handler gives for the same sequence (on a
// twin redis-server), and a denial must be the same
// application/problem+json body, with the route's handler not run.
func ReplicasShareOneRedis(t *testing.T, framework string, replica Replica) {
	t.Helper()
	srv, twinSrv := testredis.Start(t), testredis.Start(t)
	var served atomic.Int64
	var urls []string
	for range 3 {
		urls = append(urls, replica(t, Middleware(t, RedisLimiter(t, srv.Addr), httplimit.WithLimits(PerHour)), func() { served.Add(1) }))
	}
	twin := httptest.NewServer(Middleware(t, RedisLimiter(t, twinSrv.Addr), httplimit.WithLimits(PerHour)).Handler(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "item 7") })))
	t.Cleanup(twin.Close)
	c := Client(t)
	codes := map[int]int{}
	for i := range 30 {
		got, want := Fetch(t, c, urls[i%3]+"/items/7"), Fetch(t, c, twin.URL+"/items/7")
		codes[got.Status]++
		if got.Status != want.Status {
			t.Fatalf("request %d: %s %d, httplimit %d", i, framework, got.Status, want.Status)
		}
		SameHeaders(t, i, got.Header, want.Header)
		if got.Status == http.StatusTooManyRequests {
			sameProblem(t, i, got, want)
		}
	}
	if codes[200] != 10 || codes[429] != 20 || served.Load() != 10 {
		t.Errorf("%s: statuses %v, handler ran %d times; want exactly 10 admitted of 30", framework, codes, served.Load())
	}
}

func sameProblem(t *testing.T, i int, got, want Reply) {
	t.Helper()
	if got.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("request %d: Content-Type %q", i, got.Header.Get("Content-Type"))
	}
	var p, wp httplimit.Problem
	if err := json.Unmarshal([]byte(got.Body), &p); err != nil {
		t.Fatalf("request %d: body %q: %v", i, got.Body, err)
	}
	_ = json.Unmarshal([]byte(want.Body), &wp)
	if p.Type != httplimit.ProblemTypeQuotaExceeded || p.Status != 429 || strings.Join(p.ViolatedPolicies, ",") != strings.Join(wp.ViolatedPolicies, ",") || p.Title != wp.Title {
		t.Errorf("request %d: problem %+v, httplimit's %+v", i, p, wp)
	}
}

// SameHeaders compares the rate limit headers of an adapter's answer with
// httplimit's: equal, but for t and the reset instant, which move with the
// clock between the two requests.
func SameHeaders(t *testing.T, i int, got, want http.Header) {
	t.Helper()
	for _, name := range []string{"RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "Cache-Control"} {
		if got.Get(name) != want.Get(name) {
			t.Errorf("request %d: %s %q, httplimit %q", i, name, got.Get(name), want.Get(name))
		}
	}
	for _, name := range []string{"RateLimit", "X-RateLimit-Reset", "Retry-After"} {
		g, w := got.Get(name), want.Get(name)
		if (g == "") != (w == "") || (g != "" && !near(g, w)) {
			t.Errorf("request %d: %s %q, httplimit %q", i, name, g, w)
		}
	}
}

// near reports whether two header values agree up to the last number,
// which may differ by one (a second boundary between the requests).
func near(a, b string) bool {
	ia, ib := strings.LastIndexAny(a, "=: ")+1, strings.LastIndexAny(b, "=: ")+1
	if a[:ia] != b[:ib] {
		return false
	}
	na, err1 := strconv.ParseInt(a[ia:], 10, 64)
	nb, err2 := strconv.ParseInt(b[ib:], 10, 64)
	return err1 == nil && err2 == nil && na-nb <= 1 && nb-na <= 1
}
