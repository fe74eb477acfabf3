package denycache

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/storetest"
)

// The deny cache over memstore passes the suite every Store passes: its
// local answers are exact. The suite runs parallel subtests, which a
// synctest bubble does not allow, so it runs on real time, as it does for
// Redis (redis_test.go runs the cache over a real Redis).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		_, s := newMem(t)
		return storetest.Subject{Store: s, Advance: time.Sleep}
	})
}
