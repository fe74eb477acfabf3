package memstore_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// offset is how far past the start of a bubble's clock (midnight UTC,
// 2000-01-01: a boundary of every round window) inBubble moves it before
// the test starts: an arbitrary instant, on no round window boundary.
const offset = 15*time.Hour + 9*time.Minute + 26*time.Second + 535_897*time.Microsecond

// inBubble runs f in a testing/synctest bubble, at offset: time.Now,
// which a Store made without WithClock reads, is the bubble's clock, which
// stands still while goroutines run and moves only when time.Sleep asks
// it to (at once, when every goroutine of the bubble is blocked).
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(offset)
		f(t)
	})
}

// testClock is time as a parameter, through memstore.WithClock, for the
// tests a bubble cannot host: storetest.Run and refmodel.RunAll run
// parallel subtests (t.Run and t.Parallel are not allowed in a bubble),
// and the model tests jump between instants, backwards too. It starts at
// the Unix epoch; Set and Advance move it.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to us µs after the epoch.
func (c *testClock) Set(us int64) { c.ns.Store(us * int64(time.Microsecond)) }

// Advance moves the clock forward by d.
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		clk := new(testClock)
		clk.Set(time.Date(2026, 3, 14, 15, 9, 26, 535_897_000, time.UTC).UnixMicro()) // on no round boundary
		// The suite's odd keys include 10,000-byte ones, which a store on
		// the default WithMaxKeyBytes refuses (TestMaxKeyBytes).
		s, err := memstore.New(memstore.WithClock(clk.Now), memstore.WithMaxKeyBytes(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return storetest.Subject{Store: s, Advance: clk.Advance}
	})
}
