package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
)

// discardWriter is a ResponseWriter that keeps one header map, so the
// benchmark measures the handler, not the recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

// BenchmarkMiddleware compares a bare handler with the same handler behind
// the middleware on a memstore (real clock), per request, for one and two
// limits, and with headers off. The limit is never reached; "denied"
// measures the 429 path; the count_if and max_in_flight cases add what
// WithCountIf and WithMaxInFlight cost.
func BenchmarkMiddleware(b *testing.B) {
	never := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: ratewarden.MaxRate, Period: time.Minute}
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: ratewarden.MaxRate, Period: 24 * time.Hour}
	cases := []struct {
		name string
		opts []httplimit.Option
	}{
		{"one_limit", []httplimit.Option{httplimit.WithLimits(never)}},
		{"two_limits", []httplimit.Option{httplimit.WithLimits(never, daily)}},
		{"one_limit_no_headers", []httplimit.Option{httplimit.WithLimits(never), httplimit.WithHeaders(0)}},
		{"denied", []httplimit.Option{httplimit.WithLimits(fixed(1, time.Hour))}},
		// WithCountIf: a reservation per request, given back (the handler
		// answers 200) or kept.
		{"count_if_given_back", []httplimit.Option{httplimit.WithLimits(never), httplimit.WithCountIf(httplimit.Failed)}},
		{"count_if_kept", []httplimit.Option{httplimit.WithLimits(never), httplimit.WithCountIf(func(*http.Request, int) bool { return true })}},
		// WithMaxInFlight: a permit acquired and released per request.
		{"max_in_flight", []httplimit.Option{httplimit.WithLimits(never), httplimit.WithMaxInFlight(1000, time.Minute)}},
	}
	run := func(b *testing.B, h http.Handler) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = client
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			h.ServeHTTP(w, r)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, hello) })
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			st, err := memstore.New()
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			l, err := ratewarden.New(st)
			if err != nil {
				b.Fatal(err)
			}
			run(b, mustNew(b, l, tc.opts...).Handler(hello))
		})
	}
}

// BenchmarkMiddlewareRedis is BenchmarkMiddleware's one_limit beside
// WithCountIf and WithMaxInFlight on a real redis-server (one client,
// one request at a time), where each costs store round trips: a
// reservation given back is two script calls, a permit two more.
func BenchmarkMiddlewareRedis(b *testing.B) {
	never := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: ratewarden.MaxRate, Period: time.Minute}
	srv := testredis.Start(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	st, err := redisstore.New(c)
	if err != nil {
		b.Fatal(err)
	}
	l, err := ratewarden.New(st)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		opts []httplimit.Option
	}{
		{"one_limit", nil},
		{"count_if_given_back", []httplimit.Option{httplimit.WithCountIf(httplimit.Failed)}},
		{"count_if_kept", []httplimit.Option{httplimit.WithCountIf(func(*http.Request, int) bool { return true })}},
		{"max_in_flight", []httplimit.Option{httplimit.WithMaxInFlight(1000, time.Minute)}},
	}
	for i, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			// A rule of its own per case, so the cases share no counters.
			rule := httplimit.WithRule(httplimit.Rule{Name: "r" + strconv.Itoa(i), Policies: []httplimit.Policy{{Limit: never}}})
			h := mustNew(b, l, append([]httplimit.Option{rule}, tc.opts...)...).Handler(hello)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = client
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
