package mono_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/internal/mono"
)

// TestNowAndAt: readings start at the base and never go back, and At
// places an instant read between two readings between them.
func TestNowAndAt(t *testing.T) {
	c := mono.New()
	a := c.Now()
	at := c.At(time.Now())
	b := c.Now()
	if a < 0 || !(a <= at && at <= b) {
		t.Fatalf("Now %d, At(time.Now()) %d, Now %d: want 0 <= first <= At <= last", a, at, b)
	}
	before := c.Now()
	ago := c.At(time.Now().Add(-time.Hour))
	after := c.Now()
	if hour := int64(time.Hour); ago < before-hour || ago > after-hour {
		t.Fatalf("At(an hour before now) = %v, want between %v and %v", time.Duration(ago), time.Duration(before-hour), time.Duration(after-hour))
	}
}

// TestInBubble: a Clock made in a testing/synctest bubble counts the
// bubble's time exactly, though its time.Now has no monotonic reading.
func TestInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mono.New()
		time.Sleep(90 * time.Minute)
		if got := c.Now(); got != int64(90*time.Minute) {
			t.Fatalf("Now after 90 minutes in the bubble = %v, want exactly 90m", time.Duration(got))
		}
		if got := c.At(time.Now().Add(time.Second)); got != int64(90*time.Minute+time.Second) {
			t.Fatalf("At(now + 1s) = %v, want exactly 90m1s", time.Duration(got))
		}
	})
}
