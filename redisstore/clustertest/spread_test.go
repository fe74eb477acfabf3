package clustertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

var ctx = context.Background()

// flushCluster empties every primary of c (and so its replicas).
func flushCluster(t *testing.T, c *testredis.Cluster) {
	t.Helper()
	if err := c.DoAll("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
}

// dbsize returns the number of keys on s.
func dbsize(t *testing.T, s *testredis.Server) int {
	t.Helper()
	r, err := s.Do("DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(r)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeysSpreadOverPrimaries sends 10,000 distinct callers' keys through
// a Limiter with a three-limit check each: their state must spread over
// all three primaries (the caller's key is the hash tag, not the prefix),
// each primary holding a fair share.
//
// Every key must still be there when counted, however long the run took:
// the token bucket refills one unit per 4.8 h (its key lives that long),
// and a run that straddled the fixed window's hour boundary, when the
// window's keys expire, is run again. It counts every key of the shared
// cluster, which no other test writes to meanwhile (the package's tests
// run one at a time).
func TestKeysSpreadOverPrimaries(t *testing.T) {
	cluster := sharedCluster(t)
	st := store(t, client(t, clusterURL(cluster)))
	lim, _ := ratewarden.New(st)
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: 24 * time.Hour},
		{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: 24 * time.Hour},
	}
	for try := range 2 {
		hour := time.Now().Truncate(time.Hour)
		spreadOnce(t, cluster, lim, limits)
		if time.Now().Truncate(time.Hour).Equal(hour) {
			checkSpread(t, cluster, limits)
			return
		}
		t.Logf("run %d straddled an hour boundary; again", try)
	}
	t.Fatal("both runs straddled an hour boundary")
}

const spreadKeys = 10_000

func spreadOnce(t *testing.T, cluster *testredis.Cluster, lim *ratewarden.Limiter, limits []ratewarden.Limit) {
	t.Helper()
	flushCluster(t, cluster)
	const keys, workers = spreadKeys, 32
	var next, errs atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= keys {
					return
				}
				d, err := lim.AllowAll(ctx, "user:"+strconv.FormatInt(i, 10), 1, limits...)
				if err != nil || !d.Allowed {
					errs.Add(1)
					firstErr.Do(func() { t.Errorf("AllowAll(user:%d) = %+v, %v", i, d, err) })
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d of %d checks failed", errs.Load(), keys)
	}
}

func checkSpread(t *testing.T, cluster *testredis.Cluster, limits []ratewarden.Limit) {
	t.Helper()
	const keys = spreadKeys
	prims, err := cluster.Primaries()
	if err != nil || len(prims) != 3 {
		t.Fatalf("primaries %v, %v", prims, err)
	}
	total := 0
	var spread []string
	for _, p := range prims {
		n := dbsize(t, p)
		total += n
		spread = append(spread, fmt.Sprintf("%s %d (%.1f%%)", p.Addr, n/len(limits), 100*float64(n)/float64(keys*len(limits))))
		if n%len(limits) != 0 {
			t.Errorf("%s holds %d keys: not all %d keys of each caller's key on one primary", p.Addr, n, len(limits))
		}
		if n < keys*len(limits)/4 {
			t.Errorf("%s holds %d of %d keys, under a fair share (25%%)", p.Addr, n, keys*len(limits))
		}
	}
	t.Logf("callers' keys per primary: %s", strings.Join(spread, ", "))
	if total != keys*len(limits) {
		t.Fatalf("the primaries hold %d keys, want %d", total, keys*len(limits))
	}
}

// TestNoCrossSlot checks every key of a three-limit check lands in one
// slot, on the primary that serves it, for callers' keys that try to break
// the hash tag.
func TestNoCrossSlot(t *testing.T) {
	cluster := sharedCluster(t)
	// The control: the cluster does refuse a script over keys of two
	// slots, so a broken tag could not go unnoticed.
	prims, err := cluster.Primaries()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prims[0].Do("EVAL", "return 1", "2", "{a}x", "{b}x"); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("EVAL over two slots: %v; want CROSSSLOT", err)
	}

	c := client(t, clusterURL(cluster))
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: time.Minute},
		// Per hour, not per second: a key of a bucket holding one unit
		// lives one unit's drain, 6 min here (100 ms at 10/1s), and must
		// still be there for EXISTS below, however late that comes.
		{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Hour, Burst: 20},
		{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: time.Hour},
	}
	odd := []string{
		"{", "}", "{}", "}{", "{{}}", "{x}", "x{}", "{}x", "a{b}c", "a{}b{c}", "{a}{b}",
		"user{1}", "{user}:1", "rw:{a}", "#", "#tag", "a#b", "\x00", "\r\n", "ключ", "🔑",
		strings.Repeat("k", redisstore.MaxKeyLen), strings.Repeat("k", redisstore.MaxKeyLen+1), strings.Repeat("{", 300),
	}
	for i := range 200 {
		odd = append(odd, fmt.Sprintf("k%d{%d}", i, i))
	}
	for _, prefix := range []string{redisstore.DefaultPrefix, "", "app:v2:"} {
		st := store(t, c, redisstore.WithPrefix(prefix))
		lim, _ := ratewarden.New(st)
		for _, key := range odd {
			d, err := lim.AllowAll(ctx, key, 1, limits...)
			if err != nil || !d.Allowed {
				t.Fatalf("prefix %q key %.30q: AllowAll = %+v, %v", prefix, key, d, err)
			}
			if prefix != "" || len(key) > 40 || key[0] != 'k' {
				// All three state keys: one slot, stored on its primary.
				// (The generated keys are covered by AllowAll above.)
				names := make([]string, len(limits))
				for j, l := range limits {
					names[j] = st.Key(key, l)
				}
				slot, err := cluster.Slot(names[0])
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range names[1:] {
					if s, _ := cluster.Slot(n); s != slot {
						t.Fatalf("key %.30q: %q in slot %d, %q in slot %d", key, names[0], slot, n, s)
					}
				}
				owner, err := cluster.SlotOwner(slot)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := owner.Do(append([]string{"EXISTS"}, names...)...); err != nil || got != "3" {
					t.Fatalf("key %.30q: EXISTS on the slot's primary = %q, %v; want 3", key, got, err)
				}
			}
		}
	}
}
