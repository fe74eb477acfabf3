package storetest_test

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/storetest"
)

// A Store's own tests run the suite with a fresh Store per subtest. A store
// on a clock of its own passes a fake clock's Advance; a store on real time
// (Redis) passes time.Sleep.
func ExampleRun() {
	testMyStore := func(t *testing.T) { // func TestConformance(t *testing.T) in a _test.go file
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} // a clock the test moves by hand
			s, err := memstore.New(memstore.WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			return storetest.Subject{Store: s, Advance: clk.Advance}
		})
	}
	_ = testMyStore
}
