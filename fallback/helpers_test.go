package fallback

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/childproc"
	"github.com/ratewarden/ratewarden/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	childproc.Serve(runReplica) // a replica process of procs_test.go
	goleak.VerifyTestMain(m)
}

// fault is what a faultyStore does with a call.
type fault int32

const (
	healthy  fault = iota // decide on the inner memstore
	failing               // fail at once, as a refused connection does
	hanging               // wait until the context ends, as a black hole does
	badInput              // report bad input, as a store with stricter rules would
	badKey                // report the key's unusable state, as redisstore does for another type
)

// faultyStore is a real memstore behind a switch that injects the failures
// the breaker logic must handle. It counts the calls that reached it. It
// stands in for no Redis behaviour: tests of Redis faults use a real
// redis-server behind testredis.Proxy.
type faultyStore struct {
	inner *memstore.Store
	mode  atomic.Int32
	calls atomic.Int64
}

func newFaulty(t testing.TB, opts ...memstore.Option) *faultyStore {
	t.Helper()
	m, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &faultyStore{inner: m}
}

func (f *faultyStore) set(m fault) { f.mode.Store(int32(m)) }

func (f *faultyStore) do(ctx context.Context, fn func() error) error {
	f.calls.Add(1)
	switch fault(f.mode.Load()) {
	case failing:
		return fmt.Errorf("faulty: connection refused: %w", ratewarden.ErrStoreUnavailable)
	case hanging:
		<-ctx.Done()
		return fmt.Errorf("faulty: %w: %w", ratewarden.ErrStoreUnavailable, ctx.Err())
	case badInput:
		return fmt.Errorf("faulty: %w: rate too high for this store", ratewarden.ErrInvalidLimit)
	case badKey:
		return fmt.Errorf("faulty: the key holds another type: %w", ratewarden.ErrKeyState)
	}
	return fn()
}

func (f *faultyStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	return f.do(ctx, func() error { return f.inner.Check(ctx, req, res) })
}

func (f *faultyStore) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	return f.do(ctx, func() error { return f.inner.Reset(ctx, key, limits...) })
}

func (f *faultyStore) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	return f.do(ctx, func() error { return f.inner.Charge(ctx, key, limits, spent, applied) })
}

func (f *faultyStore) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (pr ratewarden.PermitResult, err error) {
	err = f.do(ctx, func() error {
		pr, err = f.inner.Acquire(ctx, key, holder, max, ttl)
		return err
	})
	return pr, err
}

func (f *faultyStore) Release(ctx context.Context, key, holder string) (ok bool, err error) {
	err = f.do(ctx, func() error {
		ok, err = f.inner.Release(ctx, key, holder)
		return err
	})
	return ok, err
}

func (f *faultyStore) Extend(ctx context.Context, key, holder string, ttl time.Duration) (ok bool, err error) {
	err = f.do(ctx, func() error {
		ok, err = f.inner.Extend(ctx, key, holder, ttl)
		return err
	})
	return ok, err
}

// recorder collects hook calls and log lines.
type recorder struct {
	mu       sync.Mutex
	changes  []string
	degraded map[Policy]int
	log      bytes.Buffer
}

func (r *recorder) options() []Option {
	r.degraded = make(map[Policy]int)
	return []Option{
		WithOnStateChange(func(from, to State) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.changes = append(r.changes, from.String()+">"+to.String())
		}),
		WithOnDegraded(func(p Policy, cause error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.degraded[p]++
		}),
		WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&r.mu, &r.log}, nil))),
	}
}

func (r *recorder) Changes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.changes...)
}

func (r *recorder) Degraded(p Policy) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.degraded[p]
}

func (r *recorder) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

// Write runs inside slog, which the hooks' lock does not cover.
func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func newStore(t testing.TB, primary ratewarden.Store, opts ...Option) *Store {
	t.Helper()
	s, err := New(primary, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// check runs one single-limit check the way a Limiter does.
func check(t testing.TB, s ratewarden.Store, key string, l ratewarden.Limit, n int64) (ratewarden.Result, error) {
	t.Helper()
	res := make([]ratewarden.Result, 1)
	err := s.Check(context.Background(), &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{l}, Cost: n}, res)
	return res[0], err
}

// mustCheck is check that fails the test on an error.
func mustCheck(t testing.TB, s ratewarden.Store, key string, l ratewarden.Limit, n int64) ratewarden.Result {
	t.Helper()
	r, err := check(t, s, key, l, n)
	if err != nil {
		t.Fatalf("Check(%q, %v, %d): %v", key, l, n, err)
	}
	return r
}

var discard = slog.New(slog.DiscardHandler)

// testLogger writes the breaker's log lines to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
