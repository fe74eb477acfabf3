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
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
)

// epoch is where the clock of a synctest bubble starts: midnight UTC,
// 2000-01-01, so fixed windows of a minute, an hour and a day all start
// there.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// newLimiter returns a Limiter on a fresh memstore, with the clock moved to
// at past epoch. It must run inside synctest.Test, where the
// clock (the memstore's time.Now) stands still unless the test sleeps.
func newLimiter(t *testing.T, at time.Duration) (*ratewarden.Limiter, *memstore.Store) {
	t.Helper()
	now, want := time.Now(), epoch.Add(at)
	if now.Before(epoch) || now.After(want) {
		t.Fatalf("newLimiter(%v) at %v: call it inside synctest.Test, before the clock passes %v", at, now, want)
	}
	time.Sleep(want.Sub(now))
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
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

// mustMemstore returns a fresh memstore on the real clock, closed by the
// test's cleanup.
func mustMemstore(t *testing.T) *memstore.Store {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// outageLimiter is a Limiter whose store is down for good, answered by
// fallback's policy (2 replicas, Retry-After 7 s), and the logger it logs
// to.
func outageLimiter(t *testing.T, policy fallback.Policy) (*ratewarden.Limiter, *slog.Logger) {
	t.Helper()
	primary, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	_ = primary.Close() // every call fails with ErrStoreUnavailable
	log, _ := newLogger()
	st, err := fallback.New(primary, fallback.WithPolicy(policy), fallback.WithReplicas(2),
		fallback.WithRetryAfter(7*time.Second), fallback.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return l, log
}
