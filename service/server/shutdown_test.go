package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/service/server"
)

// TestConcurrentShutdown: Shutdown called from two goroutines at once
// (a signal handler and a deferred cleanup, say) must not close the stop
// channel twice; both calls return once the server is down.
func TestConcurrentShutdown(t *testing.T) {
	b := memBackend(t)
	cfg := parseConfig(t, httpPolicies)
	for range 200 {
		s, err := server.New(b, server.WithConfig(cfg), server.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var ready, wg sync.WaitGroup
		ready.Add(1)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				ready.Wait()
				errs[i] = s.Shutdown(ctx)
			})
		}
		ready.Done()
		wg.Wait()
		cancel()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("Shutdown: %v, %v", errs[0], errs[1])
		}
	}
}
