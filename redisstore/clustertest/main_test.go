package clustertest

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// shared holds the two deployments that the tests which leave a deployment
// as they found it share: each is started on first use (a cluster start
// costs seconds) and closed by TestMain. A test that kills a node starts a
// deployment of its own instead (testredis.StartCluster, StartSentinel),
// so no test depends on the order the tests run in. The package's tests
// do not call t.Parallel: a test may flush the shared cluster.
var shared struct {
	clusterOnce, sentinelOnce sync.Once
	cluster                   *testredis.Cluster
	sentinel                  *testredis.Sentinel
	clusterErr, sentinelErr   error
}

// sharedCluster returns the shared 3+3 cluster, starting it on first use.
// Its tests must not kill, pause or reconfigure a node.
func sharedCluster(tb testing.TB) *testredis.Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: no Redis Cluster here (a dozen seconds to start); make test starts one")
	}
	shared.clusterOnce.Do(func() {
		start := time.Now()
		shared.cluster, shared.clusterErr = testredis.NewCluster()
		tb.Logf("shared cluster (3+3) started in %v", time.Since(start).Round(time.Millisecond))
	})
	if shared.clusterErr != nil {
		tb.Fatalf("shared cluster: %v", shared.clusterErr)
	}
	return shared.cluster
}

// sharedSentinel returns the shared Sentinel deployment (1+1+3), starting
// it on first use. Its tests must not kill, pause or reconfigure a node.
func sharedSentinel(tb testing.TB) *testredis.Sentinel {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: no Sentinel deployment here; make test starts one")
	}
	shared.sentinelOnce.Do(func() {
		start := time.Now()
		shared.sentinel, shared.sentinelErr = testredis.NewSentinel()
		tb.Logf("shared sentinel deployment (1+1+3) started in %v", time.Since(start).Round(time.Millisecond))
	})
	if shared.sentinelErr != nil {
		tb.Fatalf("shared sentinel deployment: %v", shared.sentinelErr)
	}
	return shared.sentinel
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	if shared.sentinel != nil {
		shared.sentinel.Close()
	}
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

// clusterURL is the connection URL of cluster c: every node a seed.
func clusterURL(c *testredis.Cluster) string {
	return "redis://" + strings.Join(c.Addrs(), ",") + "?dial_timeout=1s"
}

// sentinelURL is the connection URL of Sentinel deployment d.
func sentinelURL(d *testredis.Sentinel) string {
	return "redis-sentinel://" + strings.Join(d.SentinelAddrs(), ",") + "/" + testredis.MasterSet + "?dial_timeout=1s&sentinel_refresh=1s"
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

// outageOptions make a fallback that keeps limits during an outage and
// degrades only on real failures: no healthy call takes 5 s, even under
// -race on a heavily loaded machine (a dead node fails calls at once,
// whatever the deadline).
var outageOptions = []fallback.Option{
	fallback.WithPolicy(fallback.LocalFallback),
	fallback.WithTimeout(5 * time.Second),
	fallback.WithLogger(slog.New(slog.DiscardHandler)),
}

// neverOver is a limit the failover tests' traffic never reaches, so every
// decision is an admission and its Source alone tells who decided.
var neverOver = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1_000_000, Period: time.Hour}
