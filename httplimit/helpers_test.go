package httplimit_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
)

// base is a whole day in UTC, so fixed windows of a minute, an hour and a
// day all start there.
var base = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// clock is a settable time source for memstore.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(offset time.Duration) *clock { return &clock{t: base.Add(offset)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(offset time.Duration) {
	c.mu.Lock()
	c.t = base.Add(offset)
	c.mu.Unlock()
}

// newLimiter returns a Limiter on a fresh memstore reading clk.
func newLimiter(tb testing.TB, clk *clock) (*ratewarden.Limiter, *memstore.Store) {
	tb.Helper()
	st, err := memstore.New(memstore.WithClock(clk.Now))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	l, err := ratewarden.New(st)
	if err != nil {
		tb.Fatal(err)
	}
	return l, st
}

func mustNew(tb testing.TB, l *ratewarden.Limiter, opts ...httplimit.Option) *httplimit.Middleware {
	tb.Helper()
	m, err := httplimit.New(l, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// ok is the protected handler: 200 "ok", and counts its calls.
type ok struct {
	mu sync.Mutex
	n  int
}

func (h *ok) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

func (h *ok) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// get sends a GET for path from remote through h, after mod.
func get(h http.Handler, remote, path string, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// syncBuffer is a bytes.Buffer safe for a logger shared by goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newLogger() (*slog.Logger, *syncBuffer) {
	buf := new(syncBuffer)
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

func fixed(rate int64, period time.Duration) ratewarden.Limit {
	return ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: rate, Period: period}
}
