package httplimit_test

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
)

// exampleLimiter is a Limiter on a memstore whose clock stands still 20 s
// into a minute, so the output does not depend on when the example runs.
// A real service uses redisstore and the store's own clock.
func exampleLimiter() *ratewarden.Limiter {
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

var hi = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") })

// send makes a request from remote through h and returns the response.
func send(h http.Handler, remote, path string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func Example() {
	lim := exampleLimiter()
	mw, err := httplimit.New(lim, httplimit.WithPolicies(
		httplimit.Policy{Name: "burst", Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Minute}},
		httplimit.Policy{Name: "daily", Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}},
	))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for range 3 {
		w := send(h, "203.0.113.7:5000", "/")
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	w := send(h, "203.0.113.7:5000", "/")
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	fmt.Println(w.Header().Get("Content-Type"))
	fmt.Print(w.Body.String())
	// Output:
	// 200 "burst";r=1;t=40, "daily";r=999;t=43180
	// 200 "burst";r=0;t=40, "daily";r=998;t=43180
	// 429 "burst";r=0;t=40, "daily";r=998;t=40
	// RateLimit-Policy: "burst";q=2;w=60, "daily";q=1000;w=86400
	// Retry-After: 40
	// application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit \"burst\" exceeded; retry in 40 s.","retry_after":40,"violated-policies":["burst"]}
}

func ExampleNew() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(100)))
	if err != nil {
		log.Fatal(err)
	}
	w := send(mw.Handler(hi), "203.0.113.7:5000", "/")
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"))

	_, err = httplimit.New(exampleLimiter())
	fmt.Println(err)
	// Output:
	// 200 100 99
	// httplimit: no limits configured (use WithLimits, WithPolicies or WithRule): invalid config
}

// Handler is standard middleware: wrap a mux, a single route, or pass it
// to a router's Use (chi: r.Use(mw.Handler)).
func ExampleMiddleware_Handler() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /search", mw.Handler(hi)) // limited
	mux.Handle("GET /about", hi)              // not limited
	for _, path := range []string{"/search", "/search", "/about", "/about"} {
		fmt.Println(path, send(mux, "203.0.113.7:5000", path).Code)
	}
	// Output:
	// /search 200
	// /search 429
	// /about 200
	// /about 200
}

// Behind a load balancer at 10.0.0.0/8 that appends to X-Forwarded-For.
func ExampleClientIP() {
	key, err := httplimit.ClientIP(httplimit.IPConfig{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:         httplimit.XForwardedFor,
	})
	if err != nil {
		log.Fatal(err)
	}
	show := func(remote, xff string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		k, err := key(r)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(k)
	}
	show("10.0.0.2:80", "1.2.3.4, 203.0.113.7")   // via the balancer: the right-most untrusted hop
	show("198.51.100.9:80", "1.2.3.4")            // direct: the header is ignored
	show("10.0.0.2:80", "not an address")         // malformed: the peer
	show("[2001:db8:1:2:3:4:5:6]:443", "1.2.3.4") // IPv6: grouped by /64

	_, err = httplimit.ClientIP(httplimit.IPConfig{IPv6Prefix: 200})
	fmt.Println(err)
	// Output:
	// ip:203.0.113.7
	// ip:198.51.100.9
	// ip:10.0.0.2
	// ip:2001:db8:1:2::/64
	// httplimit: IPConfig.IPv6Prefix must be 1..128 (0 for 64), got 200: invalid config
}

func ExampleHeader() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.PerMinute(100)),
		httplimit.WithKey(httplimit.Header("X-API-Key")))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	fmt.Println(send(h, "203.0.113.7:5000", "/", "X-API-Key", "alice-secret").Code)
	w := send(h, "203.0.113.7:5000", "/") // no key
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// 200
	// 400 {"type":"about:blank","title":"Bad Request","status":400,"detail":"The request does not identify a client for rate limiting."}
}

func ExampleFirstOf() {
	ip, err := httplimit.ClientIP(httplimit.IPConfig{})
	if err != nil {
		log.Fatal(err)
	}
	key := httplimit.FirstOf(httplimit.Header("X-API-Key"), ip)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	k, err := key(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k)
	r.Header.Set("X-API-Key", "alice-secret")
	k, err = key(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k)
	// Output:
	// ip:203.0.113.7
	// hdr:X-Api-Key:0c848abb03307b06cf70cd4e29c157dc
}

// Per route and client: the key joins the ServeMux pattern and the address.
func ExampleJoin() {
	ip, err := httplimit.ClientIP(httplimit.IPConfig{})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithKey(httplimit.Join(httplimit.Pattern, ip)),
		httplimit.WithOnLimit(func(_ *http.Request, info httplimit.Info) { fmt.Println("limited:", info.Key) }))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw.Handler(hi))
	mux.Handle("GET /users/{id}", mw.Handler(hi))
	for _, path := range []string{"/items/1", "/items/2", "/users/1"} {
		fmt.Println(path, send(mux, "203.0.113.7:5000", path).Code)
	}
	// Output:
	// /items/1 200
	// limited: default|route:GET /items/{id}|ip:203.0.113.7
	// /items/2 429
	// /users/1 200
}

// A global limit: every client shares one budget.
func ExampleStatic() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Minute}),
		httplimit.WithKey(httplimit.Static("all")))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for _, remote := range []string{"203.0.113.1:1", "203.0.113.2:1", "203.0.113.3:1"} {
		fmt.Println(send(h, remote, "/").Code)
	}
	// Output:
	// 200
	// 200
	// 429
}

func ExamplePattern() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, err := httplimit.Pattern(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Println(k)
	})
	send(mux, "203.0.113.7:5000", "/items/42")
	// Output:
	// route:GET /items/{id}
}

func ExampleWithRule() {
	fixed := func(n int64) ratewarden.Limit {
		return ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: n, Period: time.Minute}
	}
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithRule(httplimit.Rule{
			Name:     "login",
			Match:    func(r *http.Request) bool { return r.URL.Path == "/login" },
			Policies: []httplimit.Policy{{Name: "login", Limit: fixed(1)}},
		}),
		httplimit.WithLimits(fixed(100)), // everything else
	)
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for _, path := range []string{"/login", "/login", "/home"} {
		w := send(h, "203.0.113.7:5000", path)
		fmt.Println(path, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// /login 200 "login";q=1;w=60
	// /login 429 "login";q=1;w=60
	// /home 200 "100/1m fixed_window";q=100;w=60
}

func ExampleWithCost() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}),
		httplimit.WithCost(func(r *http.Request) (int64, error) {
			if r.URL.Path == "/bulk" {
				return 5, nil
			}
			return 1, nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for _, path := range []string{"/bulk", "/one", "/bulk"} {
		w := send(h, "203.0.113.7:5000", path)
		fmt.Println(path, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /bulk 200 5
	// /one 200 4
	// /bulk 429 4
}

func ExampleWithShadow() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithShadow(true),
		httplimit.WithLogger(slog.New(slog.DiscardHandler)),
		httplimit.WithOnLimit(func(_ *http.Request, info httplimit.Info) {
			fmt.Println("would have limited", info.Key, "shadow:", info.Shadow)
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for range 2 {
		fmt.Println(send(h, "203.0.113.7:5000", "/").Code)
	}
	// Output:
	// 200
	// would have limited default|ip:203.0.113.7 shadow: true
	// 200
}

func ExampleWithSkip() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for _, path := range []string{"/healthz", "/healthz", "/", "/"} {
		fmt.Println(path, send(h, "203.0.113.7:5000", path).Code)
	}
	// Output:
	// /healthz 200
	// /healthz 200
	// / 200
	// / 429
}

// X-RateLimit-Reset is a Unix time by default; XRateLimitResetDelta sends
// the seconds from now instead.
func ExampleWithHeaders() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Minute}),
		httplimit.WithHeaders(httplimit.XRateLimitHeaders|httplimit.XRateLimitResetDelta))
	if err != nil {
		log.Fatal(err)
	}
	w := send(mw.Handler(hi), "203.0.113.7:5000", "/")
	for _, name := range []string{"RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		fmt.Printf("%s: %q\n", name, w.Header().Get(name))
	}
	// Output:
	// RateLimit: ""
	// X-RateLimit-Limit: "5"
	// X-RateLimit-Remaining: "4"
	// X-RateLimit-Reset: "40"
}

// By default X-RateLimit-Reset is the Unix time of the reset, from this
// server's clock, rounded up.
func ExampleWithHeaders_unixReset() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Minute}))
	if err != nil {
		log.Fatal(err)
	}
	before := time.Now()
	w := send(mw.Handler(hi), "203.0.113.7:5000", "/")
	reset, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
	if err != nil {
		log.Fatal(err)
	}
	in := time.Unix(reset, 0).Sub(before) // the window ends 40 s after the store's now
	fmt.Println(in > 39*time.Second && in <= 42*time.Second)
	// Output: true
}

func ExampleWithDeniedHandler() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, info httplimit.Info) {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, "slow down, retry in %ss", w.Header().Get("Retry-After"))
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	send(h, "203.0.113.7:5000", "/")
	w := send(h, "203.0.113.7:5000", "/")
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// 429 slow down, retry in 40s
}

// WithErrorHandler answers requests that cannot be decided, here a missing
// API key, without revealing why internally.
func ExampleWithErrorHandler() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.PerMinute(10)),
		httplimit.WithKey(httplimit.Header("X-API-Key")),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "an API key is required", http.StatusUnauthorized)
		}))
	if err != nil {
		log.Fatal(err)
	}
	w := send(mw.Handler(hi), "203.0.113.7:5000", "/")
	fmt.Print(w.Code, " ", w.Body.String())
	// Output:
	// 401 an API key is required
}

// With no failure policy around the store, a store error lets the request
// through by default; WithFailClosed(true) answers 503 instead.
func ExampleWithFailClosed() {
	st, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Close(); err != nil { // every check now fails, as an unreachable Redis would
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	for _, closed := range []bool{false, true} {
		mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(10)),
			httplimit.WithFailClosed(closed), httplimit.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("fail closed:", closed, "->", send(mw.Handler(hi), "203.0.113.7:5000", "/").Code)
	}
	// Output:
	// fail closed: false -> 200
	// fail closed: true -> 503
}

func ExampleWriteProblem() {
	w := httptest.NewRecorder()
	httplimit.WriteProblem(w, httplimit.Problem{Type: "about:blank", Title: "Too Many Requests", Status: 429, RetryAfter: 3})
	fmt.Println(w.Code, w.Header().Get("Content-Type"), strconv.Quote(w.Body.String()))
	// Output:
	// 429 application/problem+json "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\"retry_after\":3}\n"
}

// Several limits are checked together: a request denied by one consumes
// nothing from the others.
func ExampleWithLimits() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(
		ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute},
		ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour},
	))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for range 2 {
		w := send(h, "203.0.113.7:5000", "/")
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "1/1m fixed_window";r=0;t=40, "100/1h fixed_window";r=99;t=3580
	// 429 "1/1m fixed_window";r=0;t=40, "100/1h fixed_window";r=99;t=40
}

func ExampleWithPolicies() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithPolicies(
		httplimit.Policy{Name: "default", Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Minute}},
	))
	if err != nil {
		log.Fatal(err)
	}
	w := send(mw.Handler(hi), "203.0.113.7:5000", "/")
	fmt.Println(w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Header().Get("RateLimit"))
	// Output:
	// "default";q=100;w=60
	// "default";r=99;t=40
}

func ExampleWithKey() {
	ip, err := httplimit.ClientIP(httplimit.IPConfig{IPv4Prefix: 24}) // a /24 shares one budget
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithKey(ip))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	fmt.Println(send(h, "203.0.113.1:5000", "/").Code)
	fmt.Println(send(h, "203.0.113.2:5000", "/").Code)
	fmt.Println(send(h, "198.51.100.1:5000", "/").Code)
	// Output:
	// 200
	// 429
	// 200
}

func ExampleWithOnLimit() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithOnLimit(func(r *http.Request, info httplimit.Info) {
			b := info.Decision.Binding()
			fmt.Printf("%s %s over %v, retry after %v\n", r.Method, info.Key, b.Limit, b.RetryAfter)
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	send(h, "203.0.113.7:5000", "/")
	send(h, "203.0.113.7:5000", "/")
	// Output:
	// GET default|ip:203.0.113.7 over 1/1m fixed_window, retry after 40s
}

// The logger hears of store errors (at most one line a second) and of
// requests shadow mode let through.
func ExampleWithLogger() {
	logger := slog.New(slog.NewTextHandler(exampleStdout{}, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // deterministic output
			}
			return a
		},
	}))
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithShadow(true), httplimit.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	send(h, "203.0.113.7:5000", "/")
	send(h, "203.0.113.7:5000", "/")
	// Output:
	// level=INFO msg="httplimit: shadow mode: request over the limit passed" rule=default key=default|ip:203.0.113.7 policy="1/1m fixed_window" requests=1
}

type exampleStdout struct{}

func (exampleStdout) Write(p []byte) (int, error) { fmt.Print(string(p)); return len(p), nil }

// ProblemDenied can be wrapped to add to the default rejection.
func ExampleProblemDenied() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Minute}),
		httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, info httplimit.Info) {
			w.Header().Set("Link", `</docs/limits>; rel="help"`)
			httplimit.ProblemDenied(w, r, info)
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	send(h, "203.0.113.7:5000", "/")
	w := send(h, "203.0.113.7:5000", "/")
	fmt.Println(w.Code, w.Header().Get("Link"))
	// Output:
	// 429 </docs/limits>; rel="help"
}

func ExampleProblemError() {
	for _, err := range []error{
		fmt.Errorf("no API key: %w", ratewarden.ErrInvalidKey),
		fmt.Errorf("redis: dial 10.1.2.3:6379: connection refused: %w", ratewarden.ErrStoreUnavailable),
	} {
		w := httptest.NewRecorder()
		httplimit.ProblemError(w, httptest.NewRequest(http.MethodGet, "/", nil), err)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 400 {"type":"about:blank","title":"Bad Request","status":400,"detail":"The request does not identify a client for rate limiting."}
	// 503 {"type":"about:blank","title":"Service Unavailable","status":503,"detail":"Rate limiting is temporarily unavailable."}
}

func ExampleForwardHeader_String() {
	fmt.Println(httplimit.XForwardedFor, httplimit.Forwarded, httplimit.XRealIP)
	// Output:
	// X-Forwarded-For Forwarded X-Real-IP
}

// A service that decides on its own (an RPC front end, a gateway) renders
// the same headers as the middleware from its Decision. Append lists them
// in order with canonical names; Set writes them on an http.Header. On a
// rejection no t exceeds Retry-After, and the denying policy's equals it.
func ExampleRenderer() {
	burst := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	r := httplimit.NewRenderer(httplimit.DraftHeaders|httplimit.XRateLimitHeaders|httplimit.XRateLimitResetDelta,
		httplimit.Policy{Name: "burst", Limit: burst}, httplimit.Policy{Name: `team "a"`, Limit: daily})
	d := ratewarden.Decision{Allowed: false, Results: []ratewarden.Result{
		{Allowed: false, Limit: burst, RetryAfter: 12500 * time.Millisecond, ResetAfter: 12500 * time.Millisecond},
		{Allowed: true, Limit: daily, Remaining: 640, ResetAfter: 5 * time.Hour},
	}}
	for _, f := range r.Append(nil, d, true) {
		fmt.Printf("%s: %s\n", f.Name, f.Value)
	}
	// Output:
	// Ratelimit-Policy: "burst";q=10;w=60, "team \"a\"";q=1000;w=86400
	// Ratelimit: "burst";r=0;t=13, "team \"a\"";r=640;t=13
	// X-Ratelimit-Limit: 10
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Reset: 13
	// Retry-After: 13
}

// Set writes the fields on a response's header, as the middleware does.
func ExampleRenderer_Set() {
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	r := httplimit.NewRenderer(httplimit.XRateLimitHeaders|httplimit.XRateLimitResetDelta, httplimit.Policy{Name: "daily", Limit: daily})
	d := ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{
		{Allowed: true, Limit: daily, Remaining: 999, ResetAfter: 90 * time.Minute},
	}}
	w := httptest.NewRecorder()
	r.Set(w.Header(), d, false)
	fmt.Println(w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Reset"))
	// Output: 1000 999 5400
}

// Behind a proxy, WithClientIP keys by the client's address and notices
// when the network does not look like the configuration: here the trusted
// proxy sends no X-Forwarded-For, so every client would share its budget.
// The first such request logs a warning; ProxyWarnings counts them all.
func ExampleWithClientIP() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.PerMinute(100)),
		httplimit.WithClientIP(httplimit.IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}),
		httplimit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	send(h, "10.0.0.2:5000", "/", "X-Forwarded-For", "203.0.113.7")
	send(h, "10.0.0.2:5000", "/")
	send(h, "10.0.0.2:5000", "/")
	fmt.Printf("%+v\n", mw.ProxyWarnings())
	// Output: {NoForwardHeader:2 UntrustedForwardHeader:0}
}

// WithPartitionKey adds the draft's pk to RateLimit: a keyed hash of the
// request's key, the same for every request of one client, never the
// address or API key itself.
func ExampleWithPartitionKey() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithPolicies(httplimit.Policy{Name: "default", Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Minute}}),
		httplimit.WithPartitionKey([]byte("a secret of 16+ bytes, from config")))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	a := send(h, "203.0.113.7:5000", "/").Header().Get("RateLimit")
	b := send(h, "203.0.113.7:6000", "/").Header().Get("RateLimit")
	c := send(h, "203.0.113.8:5000", "/").Header().Get("RateLimit")
	fmt.Println(a)
	_, pa, _ := strings.Cut(a, ";pk=")
	_, pb, _ := strings.Cut(b, ";pk=")
	_, pc, _ := strings.Cut(c, ";pk=")
	fmt.Println(pa == pb, pa == pc)
	// Output:
	// "default";r=99;t=40;pk=:ESqFT1U/rdFJeeZESUCkZw==:
	// true false
}

// A Renderer with a partition key renders pk for the key given to
// AppendKey or SetKey.
func ExampleRenderer_WithPartitionKey() {
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}
	r, err := httplimit.NewRenderer(httplimit.DraftHeaders, httplimit.Policy{Name: "api", Limit: lim}).
		WithPartitionKey([]byte("a secret of 16+ bytes, from config"))
	if err != nil {
		log.Fatal(err)
	}
	d := ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{{Allowed: true, Limit: lim, Remaining: 9, ResetAfter: 30 * time.Second}}}
	for _, f := range r.AppendKey(nil, d, false, "default|ip:203.0.113.7") {
		fmt.Printf("%s: %s\n", f.Name, f.Value)
	}
	// Output:
	// Ratelimit-Policy: "api";q=10;w=60
	// Ratelimit: "api";r=9;t=30;pk=:ESqFT1U/rdFJeeZESUCkZw==:
}
