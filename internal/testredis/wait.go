package testredis

import (
	"testing"
	"time"
)

// WaitFor polls cond until it returns "", for at most d, then fails the
// test with what cond last said. Tests give d far above what the wait
// takes on a busy machine: it bounds a hang, it does not time anything.
func WaitFor(tb testing.TB, d time.Duration, cond func() string) {
	tb.Helper()
	start := time.Now()
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Since(start) > d {
			tb.Fatalf("still after %v: %s", d, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
