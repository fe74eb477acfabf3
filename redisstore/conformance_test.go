package redisstore

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/storetest"
)

// TestConformance runs the suite every Store must pass against real Redis,
// through both clients at once (every subtest has keys of its own). Time
// is Redis' own, so Advance sleeps.
func TestConformance(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	t.Run("rueidis", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			s, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			return storetest.Subject{Store: s, Advance: time.Sleep}
		})
	})
	t.Run("go-redis", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			return storetest.Subject{Store: openGoRedisStore(t, srv.Addr), Advance: time.Sleep}
		})
	})
}
