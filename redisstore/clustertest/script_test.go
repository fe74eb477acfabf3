package clustertest

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

// cachedScripts returns number_of_cached_scripts from s's INFO memory.
func cachedScripts(t *testing.T, s *testredis.Server) int {
	t.Helper()
	return infoMemory(t, s, "number_of_cached_scripts")
}

// libraries returns number_of_libraries (functions) from s's INFO memory.
func libraries(t *testing.T, s *testredis.Server) int {
	t.Helper()
	return infoMemory(t, s, "number_of_libraries")
}

// infoMemory returns the number field of s's INFO memory.
func infoMemory(t *testing.T, s *testredis.Server, field string) int {
	t.Helper()
	n, err := s.InfoInt("memory", field)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// keyOn returns a caller's key whose state lives on primary p of cluster
// c, the first of prefix+from, prefix+(from+1), ..., and the number after
// it (where to look for the next key).
func keyOn(t *testing.T, c *testredis.Cluster, p *testredis.Server, prefix string, from int) (string, int) {
	t.Helper()
	for i := from; i < from+1000; i++ {
		k := prefix + strconv.Itoa(i)
		owner, err := c.KeyOwner(k)
		if err != nil {
			t.Fatal(err)
		}
		if owner == p {
			return k, i + 1
		}
	}
	t.Fatalf("no key on %s among 1000", p.Addr)
	return "", 0
}

// everyShard returns a check of three keys on each primary of cluster
// through a Store with opts, failing t on any error or denial, and the
// primaries.
func everyShard(t *testing.T, cluster *testredis.Cluster, prefix string, opts ...redisstore.Option) (func(round int), []*testredis.Server) {
	t.Helper()
	lim, _ := ratewarden.New(store(t, client(t, clusterURL(cluster)), opts...))
	prims, err := cluster.Primaries()
	if err != nil || len(prims) != 3 {
		t.Fatalf("primaries %v, %v", prims, err)
	}
	var keys []string
	for _, p := range prims {
		next := 0
		for range 3 {
			var k string
			k, next = keyOn(t, cluster, p, prefix, next)
			keys = append(keys, k)
		}
	}
	l := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	return func(round int) {
		t.Helper()
		for _, k := range keys {
			r, err := lim.Allow(ctx, k, l)
			if err != nil || !r.Allowed {
				t.Fatalf("round %d, key %s: %+v, %v", round, k, r, err)
			}
		}
	}, prims
}

// TestScriptFlushOnEveryPrimary empties the script cache of every primary
// while a Store running its script with EVALSHA (WithFunctions(false), as
// on a Redis 6.2 Cluster) keeps checking keys on every shard: no caller
// sees an error (EVALSHA meets NOSCRIPT, EVAL reloads), and every primary
// has the script cached again.
func TestScriptFlushOnEveryPrimary(t *testing.T) {
	cluster := sharedCluster(t)
	check, prims := everyShard(t, cluster, "script:", redisstore.WithFunctions(false))
	flushRounds(t, cluster, prims, check, "cached scripts", cachedScripts, "SCRIPT", "FLUSH")
}

// flushRounds checks keys on every primary (check), then three times:
// runs flush on every primary, sees that none holds any of what held
// counts (named what), checks again, and sees that each holds some again.
func flushRounds(t *testing.T, cluster *testredis.Cluster, prims []*testredis.Server, check func(round int), what string, held func(*testing.T, *testredis.Server) int, flush ...string) {
	t.Helper()
	check(0)
	for round := 1; round <= 3; round++ {
		if err := cluster.DoAll(flush...); err != nil {
			t.Fatal(err)
		}
		for _, p := range prims {
			if n := held(t, p); n != 0 {
				t.Fatalf("%s holds %d %s after %v", p.Addr, n, what, flush)
			}
		}
		check(round)
		for _, p := range prims {
			if n := held(t, p); n < 1 {
				t.Fatalf("round %d: %s holds no %s after checks on its keys", round, p.Addr, what)
			}
		}
	}
}

// TestFunctionFlushOnEveryPrimary: a Store runs its checks as a function
// on a Cluster too, and loads the library on every node again after a
// FUNCTION FLUSH of every primary, without a caller seeing an error and
// without falling back to scripts (no script gets cached).
func TestFunctionFlushOnEveryPrimary(t *testing.T) {
	cluster := sharedCluster(t)
	if err := cluster.DoAll("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	check, prims := everyShard(t, cluster, "function:")
	flushRounds(t, cluster, prims, check, "function libraries", libraries, "FUNCTION", "FLUSH")
	for _, p := range prims {
		if n := cachedScripts(t, p); n != 0 {
			t.Errorf("%s has %d scripts cached: checks ran as scripts, not as the function", p.Addr, n)
		}
	}
	reps, err := cluster.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		// Replication is asynchronous: give it a few seconds.
		deadline := time.Now().Add(10 * time.Second)
		for libraries(t, r) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s holds no function library 10s after its primary loaded the store's", r.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
