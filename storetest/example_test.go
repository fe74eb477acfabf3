package storetest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/storetest"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// A Store's own tests run the suite with a fresh Store per subtest. A store
// on a clock of its own passes a fake clock's Advance; a store on real time
// (Redis) passes time.Sleep.
func ExampleRun() {
	testMyStore := func(t *testing.T) { // func TestConformance(t *testing.T) in a _test.go file
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			s, err := memstore.New(memstore.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			return storetest.Subject{Store: s, Advance: clk.Advance}
		})
	}
	_ = testMyStore
}
