package clustertest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// cachedScripts returns number_of_cached_scripts from s's INFO memory.
func cachedScripts(t *testing.T, s *testredis.Server) int {
	t.Helper()
	info, err := s.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "number_of_cached_scripts:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s: no number_of_cached_scripts in INFO memory", s.Addr)
	return 0
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

// TestScriptFlushOnEveryPrimary empties the script cache of every primary
// while a Store that already used the script keeps checking keys on every
// shard: no caller sees an error (EVALSHA meets NOSCRIPT, EVAL reloads),
// and every primary has the script cached again.
func TestScriptFlushOnEveryPrimary(t *testing.T) {
	cluster := sharedCluster(t)
	lim, _ := ratewarden.New(store(t, client(t, clusterURL(cluster))))
	prims, err := cluster.Primaries()
	if err != nil || len(prims) != 3 {
		t.Fatalf("primaries %v, %v", prims, err)
	}
	var keys []string
	for _, p := range prims {
		next := 0
		for range 3 {
			var k string
			k, next = keyOn(t, cluster, p, "script:", next)
			keys = append(keys, k)
		}
	}
	l := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	check := func(round int) {
		t.Helper()
		for _, k := range keys {
			r, err := lim.Allow(ctx, k, l)
			if err != nil || !r.Allowed {
				t.Fatalf("round %d, key %s: %+v, %v", round, k, r, err)
			}
		}
	}
	check(0) // the script is in use on every primary
	for round := 1; round <= 3; round++ {
		if err := cluster.DoAll("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		for _, p := range prims {
			if n := cachedScripts(t, p); n != 0 {
				t.Fatalf("%s caches %d scripts after SCRIPT FLUSH", p.Addr, n)
			}
		}
		check(round)
		for _, p := range prims {
			if n := cachedScripts(t, p); n < 1 {
				t.Fatalf("round %d: %s has no script cached after checks on its keys", round, p.Addr)
			}
		}
	}
}
