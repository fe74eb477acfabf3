package lease

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/storetest"
)

// TestConformance runs the suite every Store must pass against real Redis.
// With leases of 3, every fixed window and token bucket check of the suite
// runs through leases. Time is Redis' own, so Advance sleeps.
func TestConformance(t *testing.T) {
	srv := testredis.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		_, l := openLease(t, srv.Addr, WithSize(3))
		return storetest.Subject{Store: l, Advance: time.Sleep}
	})
}
