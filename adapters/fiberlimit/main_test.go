package fiberlimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, except two of fasthttp's own:
// the process-wide Date header ticker, which never stops, and a stopped
// server's worker-pool cleaner, which sleeps out its idle period (10 s)
// before it sees the stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}
