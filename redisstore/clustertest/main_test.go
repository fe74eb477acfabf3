package clustertest

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// The deployments every test of the package shares.
var (
	cluster  *testredis.Cluster
	sentinel *testredis.Sentinel
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	var wg sync.WaitGroup
	var cerr, serr error
	wg.Go(func() { cluster, cerr = testredis.NewCluster() })
	wg.Go(func() { sentinel, serr = testredis.NewSentinel() })
	wg.Wait()
	stop := func() {
		if cluster != nil {
			cluster.Close()
		}
		if sentinel != nil {
			sentinel.Close()
		}
	}
	defer stop()
	if cerr != nil || serr != nil {
		fmt.Fprintf(os.Stderr, "clustertest: start: cluster: %v; sentinel: %v\n", cerr, serr)
		return 1
	}
	fmt.Fprintf(os.Stderr, "clustertest: cluster (3+3) and sentinel (1+1+3) ready in %v\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	stop()
	if code != 0 {
		return code
	}
	// Clients that failed or were closed can leave a delayed rueidis
	// topology refresh running for up to a second, and a cluster client
	// closes the connections a new slot map replaced 5 s later.
	if err := settle(); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: %v\n", err)
		return 1
	}
	return 0
}

// settle waits for those goroutines to end: up to 30 s, far more than the
// 5 s they may take, for a busy machine.
func settle() error {
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = goleak.Find(); err == nil {
			return nil
		}
	}
	return fmt.Errorf("leaked goroutines, 30 s after the tests: %w", err)
}

// failoverCap caps the waits for a failover and its aftermath (a replica
// promoted, decisions from Redis again): those take a few seconds; the cap
// leaves room for a busy machine.
const failoverCap = 60 * time.Second

// clusterURL is the connection URL of the test cluster: every node a seed.
func clusterURL() string {
	u := "redis://"
	for i, a := range cluster.Addrs() {
		if i > 0 {
			u += ","
		}
		u += a
	}
	return u + "?dial_timeout=1s"
}

// sentinelURL is the connection URL of the test Sentinel setup.
func sentinelURL() string {
	u := "redis-sentinel://"
	for i, a := range sentinel.SentinelAddrs() {
		if i > 0 {
			u += ","
		}
		u += a
	}
	return u + "/" + testredis.MasterSet + "?dial_timeout=1s&sentinel_refresh=1s"
}

// client returns a client for url made by redisstore.ClientFromURL,
// closed when the test ends.
func client(tb testing.TB, url string) rueidis.Client {
	tb.Helper()
	c, err := redisstore.ClientFromURL(url)
	if err != nil {
		tb.Fatalf("ClientFromURL(%s): %v", url, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// store returns a Store on c.
func store(tb testing.TB, c rueidis.Client, opts ...redisstore.Option) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
