package memstore_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// start is an arbitrary instant, away from round window boundaries.
var start = time.Date(2026, 3, 14, 15, 9, 26, 535_897_000, time.UTC)

func newClock() *fakeClock { return &fakeClock{t: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		clk := newClock()
		s, err := memstore.New(memstore.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return storetest.Subject{Store: s, Advance: clk.Advance}
	})
}
