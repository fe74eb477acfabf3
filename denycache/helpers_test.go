package denycache

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

// fakeClock is a clock moved by hand, shared by a memstore and the cache.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration)  { c.ns.Add(int64(d)) }
func (c *fakeClock) opt() memstore.Option { return memstore.WithClock(c.now) }
func (c *fakeClock) cacheOpt() Option     { return WithClock(c.now) }
func (c *fakeClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }

// counting is a real store that counts the checks reaching it.
type counting struct {
	ratewarden.Store
	checks atomic.Int64
}

func (c *counting) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	c.checks.Add(1)
	return c.Store.Check(ctx, req, res)
}

// newMem returns a memstore on clk behind a call counter, and a deny cache
// over it.
func newMem(t testing.TB, clk *fakeClock, opts ...Option) (*counting, *Store) {
	t.Helper()
	m, err := memstore.New(clk.opt())
	if err != nil {
		t.Fatal(err)
	}
	inner := &counting{Store: m}
	s, err := New(inner, append([]Option{clk.cacheOpt()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return inner, s
}

// check runs one request through st and returns its results.
func check(t testing.TB, st ratewarden.Store, key string, cost int64, peek bool, limits ...ratewarden.Limit) []ratewarden.Result {
	t.Helper()
	res := make([]ratewarden.Result, len(limits))
	if err := st.Check(bg, &ratewarden.Request{Key: key, Limits: limits, Cost: cost, Peek: peek}, res); err != nil {
		t.Fatalf("check %s cost %d: %v", key, cost, err)
	}
	return res
}
