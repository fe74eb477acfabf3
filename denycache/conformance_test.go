package denycache

import (
	"testing"

	"github.com/ratewarden/ratewarden/storetest"
)

// The deny cache over memstore, on one fake clock, passes the suite every
// Store passes: its local answers are exact.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		clk := newClock()
		_, s := newMem(t, clk)
		return storetest.Subject{Store: s, Advance: clk.add}
	})
}
