package denycache

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

// Tests that move time run in a testing/synctest bubble: time.Sleep moves
// the clock that the memstore and the cache both read (time.Now), exactly
// and at once. A bubble's clock starts at 2000-01-01 00:00:00 UTC, on a
// boundary of every period the tests use.

// counting is a real store that counts the checks reaching it.
type counting struct {
	ratewarden.Store
	checks atomic.Int64
}

func (c *counting) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	c.checks.Add(1)
	return c.Store.Check(ctx, req, res)
}

// newMem returns a memstore behind a call counter, and a deny cache over
// it, both on time.Now.
func newMem(t testing.TB, opts ...Option) (*counting, *Store) {
	t.Helper()
	m, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	inner := &counting{Store: m}
	s, err := New(inner, opts...)
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
