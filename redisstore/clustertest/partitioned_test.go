package clustertest

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

// TestPartitionedFailoverIsolatesShards kills a primary under load with a
// breaker per group of slots (fallback.NewPartitioned on redisstore.Slot):
// keys of the failed primary degrade to their local shares until its
// replica is promoted, while keys on the healthy primaries stay decided by
// Redis throughout. (With cluster-require-full-coverage yes, Redis' default,
// every primary refuses commands until the failover completes, so the
// cluster is set to no, as docs/operations.md recommends.) The test kills
// a primary, so it runs on a cluster of its own.
func TestPartitionedFailoverIsolatesShards(t *testing.T) {
	cluster := testredis.StartCluster(t)
	for _, n := range cluster.Nodes {
		if _, err := n.Do("CONFIG", "SET", "cluster-require-full-coverage", "no"); err != nil {
			t.Fatalf("%s: CONFIG SET cluster-require-full-coverage no: %v", n.Addr, err)
		}
	}

	const groups = 16
	group := func(key string) int { return redisstore.Slot(key) / (16384 / groups) }
	prims, err := cluster.Primaries()
	if err != nil || len(prims) != 3 {
		t.Fatalf("primaries %v, %v", prims, err)
	}
	victim := prims[len(prims)-1]
	topo, err := testredis.Topology(victim)
	if err != nil {
		t.Fatal(err)
	}
	victimGroups := map[int]bool{}
	for _, n := range topo {
		if n.Addr == victim.Addr {
			for _, r := range n.Slots {
				for g := r[0] / (16384 / groups); g <= r[1]/(16384/groups); g++ {
					victimGroups[g] = true
				}
			}
		}
	}
	if len(victimGroups) == 0 || len(victimGroups) == groups {
		t.Fatalf("victim %s covers slot groups %v", victim.Addr, victimGroups)
	}
	// Keys on healthy primaries in groups the victim has no slot of, and
	// keys on the victim.
	var healthy, onVictim []string
	for i := 0; len(healthy) < 24 || len(onVictim) < 8; i++ {
		if i > 10000 {
			t.Fatal("not enough keys found")
		}
		k := "iso:" + strconv.Itoa(i)
		owner, err := cluster.KeyOwner(k)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case owner == victim && len(onVictim) < 8:
			onVictim = append(onVictim, k)
		case owner != victim && !victimGroups[group(k)] && len(healthy) < 24:
			healthy = append(healthy, k)
		}
	}

	raw := store(t, client(t, clusterURL(cluster)))
	// Why decisions were degraded, for the report when a healthy shard's were.
	var causesMu sync.Mutex
	causes := map[string]int{}
	opts := append(append([]fallback.Option(nil), outageOptions...), fallback.WithOnDegraded(func(_ fallback.Policy, cause error) {
		causesMu.Lock()
		defer causesMu.Unlock()
		causes[cause.Error()]++
	}))
	st, err := fallback.NewPartitioned(raw, groups, group, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}

	var (
		healthyCalls, healthyDegraded atomic.Int64
		victimCalls, victimDegraded   atomic.Int64
		victimFromRedis               atomic.Int64 // after the promotion
		promoted, stop                atomic.Bool
		errs                          atomic.Int64
		firstErr                      sync.Once
	)
	keys := append(append([]string(nil), healthy...), onVictim...)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; !stop.Load(); i = (i + 1) % len(keys) {
				time.Sleep(time.Millisecond)
				k := keys[i]
				r, err := lim.Allow(ctx, k, neverOver)
				if err != nil {
					errs.Add(1)
					firstErr.Do(func() { t.Errorf("Allow(%s): %v", k, err) })
					continue
				}
				if i < len(healthy) {
					healthyCalls.Add(1)
					if r.Degraded() {
						healthyDegraded.Add(1)
					}
					continue
				}
				victimCalls.Add(1)
				switch {
				case r.Degraded():
					victimDegraded.Add(1)
				case promoted.Load():
					victimFromRedis.Add(1)
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	testredis.WaitFor(t, failoverCap, func() string { // traffic on every shard before the kill
		if h, v := healthyCalls.Load(), victimCalls.Load(); h < 100 || v < 50 {
			return fmt.Sprintf("%d decisions on healthy primaries (want 100) and %d on the victim (want 50) before the kill", h, v)
		}
		return ""
	})
	if healthyDegraded.Load() != 0 || victimDegraded.Load() != 0 {
		t.Fatalf("before the kill: %d healthy and %d victim decisions degraded", healthyDegraded.Load(), victimDegraded.Load())
	}
	killed := time.Now()
	victim.Kill()
	if err := cluster.WaitHealthy(failoverCap); err != nil {
		t.Fatal(err)
	}
	promoted.Store(true)
	promotedIn := time.Since(killed)
	t.Logf("replica promoted %v after the kill", promotedIn.Round(time.Millisecond))
	checkFailoverFigures(t, promotedIn, 0, 0)
	// The victim's partitions probe again within a second and find the
	// promoted replica.
	testredis.WaitFor(t, failoverCap, func() string {
		if victimFromRedis.Load() == 0 {
			return "keys of the failed primary not decided by Redis again since the promotion"
		}
		return ""
	})
	stop.Store(true)
	wg.Wait()
	t.Logf("healthy shards: %d decisions, %d degraded; failed shard: %d decisions, %d degraded; %d errors",
		healthyCalls.Load(), healthyDegraded.Load(), victimCalls.Load(), victimDegraded.Load(), errs.Load())
	if victimDegraded.Load() == 0 {
		t.Fatal("no decision on the failed primary's keys was degraded: the kill was not felt, the test proves nothing")
	}
	if n := healthyDegraded.Load(); n != 0 {
		causesMu.Lock()
		t.Errorf("%d decisions on healthy primaries were degraded; want 0 with a breaker per slot group (causes of all degraded decisions: %v)", n, causes)
		causesMu.Unlock()
	}
	if healthyCalls.Load() == 0 {
		t.Error("no decision on healthy primaries")
	}
}
