package stack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/stack"
	"github.com/ratewarden/ratewarden/storetest"
)

var quiet = fallback.WithLogger(slog.New(slog.DiscardHandler))

// rueidisClient returns a client for addrs (several: a Cluster), closed
// when the test ends.
func rueidisClient(tb testing.TB, addrs ...string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%v): %v", addrs, err)
	}
	tb.Cleanup(c.Close)
	return c
}

func newStack(tb testing.TB, c rueidis.Client, opts ...stack.Option) *stack.Stack {
	tb.Helper()
	// A deadline a healthy first call (NOSCRIPT, then EVAL) meets on a busy
	// machine, so that no result of these tests is degraded by accident.
	st, err := stack.New(c, append([]stack.Option{stack.WithFallback(fallback.WithTimeout(10*time.Second), quiet)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func limiter(tb testing.TB, st ratewarden.Store) *ratewarden.Limiter {
	tb.Helper()
	l, err := ratewarden.New(st)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func scriptCalls(tb testing.TB, srv *testredis.Server) int64 {
	tb.Helper()
	n, err := srv.ScriptCalls()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	return n
}

var daily = ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: 24 * time.Hour}

func TestNewRejectsBadConfig(t *testing.T) {
	srv := testredis.Start(t)
	c := rueidisClient(t, srv.Addr)
	var nilRueidis rueidis.Client
	var nilGoRedis *redis.Client
	for _, tc := range []struct {
		name string
		make func() (*stack.Stack, error)
		want string
	}{
		{"nil rueidis client", func() (*stack.Stack, error) { return stack.New(nilRueidis) }, "stack: client must not be nil"},
		{"nil go-redis client", func() (*stack.Stack, error) { return stack.NewGoRedis(nilGoRedis) }, "stack: client must not be nil"},
		{"nil option", func() (*stack.Stack, error) { return stack.New(c, stack.WithDenyCache(5), nil) }, "stack: option 1 is nil"},
		{"negative deny cache", func() (*stack.Stack, error) { return stack.New(c, stack.WithDenyCache(-1)) }, "stack: deny cache size"},
		{"no slot groups", func() (*stack.Stack, error) { return stack.New(c, stack.WithSlotGroups(0)) }, "stack: slot groups"},
		{"too many slot groups", func() (*stack.Stack, error) { return stack.New(c, stack.WithSlotGroups(16385)) }, "stack: slot groups"},
		{"bad redis option", func() (*stack.Stack, error) { return stack.New(c, stack.WithRedis(redisstore.WithPrefix("{"))) }, "redisstore: prefix"},
		{"bad lease option", func() (*stack.Stack, error) { return stack.New(c, stack.WithLeases(lease.WithSize(0))) }, "lease: "},
		{"bad fallback option", func() (*stack.Stack, error) {
			return stack.New(c, stack.WithFallback(fallback.WithTimeout(0)))
		}, "fallback: timeout"},
	} {
		st, err := tc.make()
		if st != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v; want ErrInvalidConfig starting %q", tc.name, st, err, tc.want)
		}
	}
	st := newStack(t, c)
	if _, err := st.NewFront(fallback.WithReplicas(0)); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("NewFront with a bad option: %v; want ErrInvalidConfig naming replicas", err)
	}
}

// TestConformance runs the suite every Store passes over the assembled
// stack, through both clients, and over a second front. The four run at
// once: every subtest has keys of its own, and the suite reruns a timed
// check with a longer period when its calls came late.
func TestConformance(t *testing.T) {
	srv := testredis.Start(t)
	c := rueidisClient(t, srv.Addr)
	t.Run("rueidis", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			return storetest.Subject{Store: newStack(t, c), Advance: time.Sleep}
		})
	})
	t.Run("go-redis", func(t *testing.T) {
		t.Parallel()
		g := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = g.Close() })
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			st, err := stack.NewGoRedis(g, stack.WithFallback(fallback.WithTimeout(10*time.Second), quiet))
			if err != nil {
				t.Fatal(err)
			}
			return storetest.Subject{Store: st, Advance: time.Sleep}
		})
	})
	// With small leases, every fixed window and token bucket check of the
	// suite runs through leases.
	t.Run("leases", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			st := newStack(t, c, stack.WithLeases(lease.WithSize(3)))
			t.Cleanup(func() { _ = st.Close(bg) })
			return storetest.Subject{Store: st, Advance: time.Sleep}
		})
	})
	t.Run("front", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) storetest.Subject {
			f, err := newStack(t, c).NewFront(fallback.WithPolicy(fallback.FailClosed))
			if err != nil {
				t.Fatal(err)
			}
			return storetest.Subject{Store: f, Advance: time.Sleep}
		})
	})
}

// TestDenyCacheLayer: with the deny cache (the default) a key over its
// limit stops costing script calls; without it every check is one.
func TestDenyCacheLayer(t *testing.T) {
	srv := testredis.Start(t)
	c := rueidisClient(t, srv.Addr)
	for _, tc := range []struct {
		name   string
		opts   []stack.Option
		cached bool
	}{
		{"default", nil, true},
		{"sized", []stack.Option{stack.WithDenyCache(10)}, true},
		{"off", []stack.Option{stack.WithDenyCache(0)}, false},
	} {
		st := newStack(t, c, tc.opts...)
		if got := st.DenyCache() != nil; got != tc.cached {
			t.Errorf("%s: DenyCache() set: %v, want %v", tc.name, got, tc.cached)
		}
		l := limiter(t, st)
		key := "flood:" + tc.name
		for range daily.Rate {
			if r, err := l.Allow(bg, key, daily); err != nil || !r.Allowed {
				t.Fatalf("%s: %+v, %v", tc.name, r, err)
			}
		}
		before := scriptCalls(t, srv)
		const over = 20
		cached := 0
		for range over {
			r, err := l.Allow(bg, key, daily)
			if err != nil || r.Allowed {
				t.Fatalf("%s: over the limit: %+v, %v", tc.name, r, err)
			}
			if r.Source == ratewarden.SourceCache {
				cached++
			}
		}
		calls := scriptCalls(t, srv) - before
		if tc.cached && (calls != 1 || cached != over-1) {
			t.Errorf("%s: %d denials made %d script calls (%d cached), want 1 call and the rest from the cache", tc.name, over, calls, cached)
		}
		if !tc.cached && (calls != over || cached != 0) {
			t.Errorf("%s: %d denials made %d script calls (%d cached), want one call each", tc.name, over, calls, cached)
		}
	}
}

// TestFrontsShareLayersNotBreakers: fronts share the script store and the
// deny cache, but each has breakers of its own. Redis refusing writes
// (maxmemory reached) opens the breaker of the front that checked (trip
// after 1) and nothing else; a key whose state holds a value of the wrong
// type is that key's trouble and opens none.
func TestFrontsShareLayersNotBreakers(t *testing.T) {
	srv := testredis.Start(t)
	st := newStack(t, rueidisClient(t, srv.Addr), stack.WithFallback(fallback.WithTripAfter(1), fallback.WithProbeInterval(time.Hour)))
	a, err := st.NewFront(fallback.WithPolicy(fallback.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.NewFront(fallback.WithPolicy(fallback.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	la, lb := limiter(t, a), limiter(t, b)

	// Shared: a denial learned through a is answered by the cache through b.
	for range daily.Rate + 1 {
		if _, err := la.Allow(bg, "shared", daily); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := lb.Allow(bg, "shared", daily); err != nil || r.Allowed || r.Source != ratewarden.SourceCache {
		t.Errorf("front b after front a's denial: %+v, %v; want the shared deny cache's denial", r, err)
	}

	// A key's bad state trips nothing.
	if _, err := srv.Do("SET", st.Script().Key("broken", daily), "not a number"); err != nil {
		t.Fatal(err)
	}
	if r, err := la.Allow(bg, "broken", daily); err != nil || r.Source != ratewarden.SourceFailClosed {
		t.Fatalf("front a on a broken key: %+v, %v; want fail_closed", r, err)
	}
	if a.State() != fallback.StateClosed {
		t.Errorf("front a after a broken key: %v, want closed", a.State())
	}

	// Not shared: the breakers.
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	r, err := la.Allow(bg, "new", daily)
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err != nil || r.Source != ratewarden.SourceFailClosed {
		t.Fatalf("front a on a Redis out of memory: %+v, %v; want fail_closed", r, err)
	}
	if a.State() != fallback.StateOpen || b.State() != fallback.StateClosed || st.State() != fallback.StateClosed {
		t.Errorf("breakers: a %v, b %v, default %v; want only a's open", a.State(), b.State(), st.State())
	}
	if r, err := lb.Allow(bg, "fine", daily); err != nil || !r.Allowed || r.Source != ratewarden.SourceStore {
		t.Errorf("front b on a good key: %+v, %v; want Redis' admission", r, err)
	}
}

// TestClusterBreakerPerSlotGroup: on a real 3-primary Cluster each front
// has a breaker per group of slots (16 by default, WithSlotGroups(n)
// otherwise), through both clients. A key on a primary that refuses writes
// (maxmemory reached) opens only the breaker of its group, Slot(key) × n /
// 16384; keys of the other groups, on other primaries, are still decided
// by Redis.
func TestClusterBreakerPerSlotGroup(t *testing.T) {
	cl := testredis.StartCluster(t)
	addrs := cl.Addrs()
	rc := rueidisClient(t, addrs...)
	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = gc.Close() })
	opt := stack.WithFallback(fallback.WithTimeout(10*time.Second), quiet, fallback.WithTripAfter(1), fallback.WithProbeInterval(time.Hour))

	// By default a breaker per primary; WithSlotGroups(n) makes it n.
	if st, err := stack.NewGoRedis(gc, opt); err != nil {
		t.Fatal(err)
	} else if n := len(st.States()); n != 3 {
		t.Errorf("go-redis ClusterClient: %d breakers, want one per primary (3)", n)
	}
	if n := len(newStack(t, rc).States()); n != 3 {
		t.Errorf("rueidis cluster client: %d breakers, want one per primary (3)", n)
	}
	if st, err := stack.NewGoRedis(gc, opt, stack.WithSlotGroups(stack.DefaultSlotGroups)); err != nil {
		t.Fatal(err)
	} else if n := len(st.States()); n != stack.DefaultSlotGroups {
		t.Errorf("go-redis ClusterClient, WithSlotGroups(%d): %d breakers", stack.DefaultSlotGroups, n)
	}

	const groups = 4
	st, err := stack.New(rc, opt, stack.WithSlotGroups(groups))
	if err != nil {
		t.Fatal(err)
	}
	l := limiter(t, st)
	// One key per group, found by Slot: group 2's on a primary that does
	// not hold all of another group (groups of slots straddle primaries),
	// the other groups' keys on other primaries.
	topo, err := testredis.Topology(cl.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var owner [16384]string
	for _, n := range topo {
		for _, r := range n.Slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				owner[slot] = n.Addr
			}
		}
	}
	victim := ""
	for slot := 2 * 16384 / groups; slot < 3*16384/groups && victim == ""; slot++ {
		ok := true
		for g := range groups {
			ok = ok && (g == 2 || slices.ContainsFunc(owner[g*16384/groups:(g+1)*16384/groups], func(a string) bool { return a != owner[slot] }))
		}
		if ok {
			victim = owner[slot]
		}
	}
	if victim == "" {
		t.Fatalf("every primary of group 2 holds all of another group: %v", topo)
	}
	keys := make([]string, groups)
	for i, found := 0, 0; found < groups; i++ {
		if i == 10_000_000 {
			t.Fatalf("no key found for every group: %q", keys)
		}
		k := "user:" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + time.Duration(i).String()
		slot := redisstore.Slot(k)
		if g := slot * groups / 16384; keys[g] == "" && (owner[slot] == victim) == (g == 2) {
			keys[g] = k
			found++
		}
	}
	var victimSrv *testredis.Server
	for _, n := range cl.Nodes {
		if n.Addr == victim {
			victimSrv = n
		}
	}
	for g, k := range keys {
		if r, err := l.Allow(bg, k, daily); err != nil || !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Fatalf("group %d: %s: %+v, %v; want Redis' admission", g, k, r, err)
		}
	}
	if _, err := victimSrv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = victimSrv.Do("CONFIG", "SET", "maxmemory", "0") })
	if r, err := l.Allow(bg, keys[2], daily); err != nil || !r.Source.Degraded() {
		t.Fatalf("key on a primary out of memory: %+v, %v; want a degraded answer", r, err)
	}
	want := []fallback.State{fallback.StateClosed, fallback.StateClosed, fallback.StateOpen, fallback.StateClosed}
	if got := st.States(); len(got) != groups || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Errorf("States() = %v, want %v", got, want)
	}
	for g, k := range keys {
		if g == 2 {
			continue
		}
		if r, err := l.Allow(bg, k, daily); err != nil || !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("group %d (another primary) after group 2 failed: %+v, %v; want Redis' admission", g, r, err)
		}
	}
}

// TestLeasesLayer: WithLeases puts lease mode under the deny cache; a hot
// key is then answered mostly from leases, Reset through the stack drops
// the key's lease, and Close gives unused units back and leaves plain
// checks.
func TestLeasesLayer(t *testing.T) {
	srv := testredis.Start(t)
	c := rueidisClient(t, srv.Addr)
	if newStack(t, c).Leases() != nil {
		t.Error("a default Stack has leases")
	}
	st := newStack(t, c, stack.WithLeases(lease.WithSize(50)))
	if st.Leases() == nil || st.DenyCache() == nil {
		t.Fatalf("Leases() %v, DenyCache() %v; want both", st.Leases(), st.DenyCache())
	}
	l := limiter(t, st)
	hot := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	fromLease := 0
	for range 200 {
		r, err := l.Allow(bg, "hot", hot)
		if err != nil || !r.Allowed {
			t.Fatalf("hot key: %+v, %v", r, err)
		}
		if r.Source == ratewarden.SourceLease {
			fromLease++
		}
	}
	// 4 leases of 50, one more if a day ended meanwhile.
	if fromLease < 200-5 {
		t.Errorf("%d of 200 checks from leases, want all but one per lease", fromLease)
	}
	if n := st.Leases().Leases(); n != 1 {
		t.Errorf("%d leases held, want 1", n)
	}
	if err := l.Reset(bg, "hot", hot); err != nil {
		t.Fatal(err)
	}
	if n := st.Leases().Leases(); n != 0 {
		t.Errorf("after Reset: %d leases held, want 0", n)
	}
	if r, err := l.Allow(bg, "hot", hot); err != nil || !r.Allowed || r.Remaining < hot.Rate-50 {
		t.Errorf("after Reset: %+v, %v; want a fresh allowance", r, err)
	}
	if err := st.Close(bg); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(bg, "hot", hot); err != nil || r.Source != ratewarden.SourceStore {
		t.Errorf("after Close: %+v, %v; want a plain check", r, err)
	}
	if err := newStack(t, c).Close(bg); err != nil {
		t.Errorf("Close without leases: %v", err)
	}
}

var bg = context.Background()

// clusterKeys returns n keys spread over all slots, and the address of
// the primary that serves each key's slot now.
func clusterKeys(t *testing.T, cl *testredis.Cluster, n int) ([]string, map[string]string) {
	t.Helper()
	topo, err := testredis.Topology(cl.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var owner [16384]string
	for _, node := range topo {
		for _, r := range node.Slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				owner[slot] = node.Addr
			}
		}
	}
	keys, owners := make([]string, n), map[string]string{}
	for i := range keys {
		keys[i] = "client:" + strconv.Itoa(i)
		owners[keys[i]] = owner[redisstore.Slot(keys[i])]
	}
	return keys, owners
}

func nodeAt(cl *testredis.Cluster, addr string) *testredis.Server {
	for _, n := range cl.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// breakerLooks tallies looks at a front's breakers by primary: how often
// the victim's was open, and which others were ever not closed.
type breakerLooks struct {
	victim           string
	victimOpen       int
	healthyNotClosed map[string]fallback.State
}

func (b *breakerLooks) look(states map[string]fallback.State) {
	for addr, state := range states {
		switch {
		case addr == b.victim && state == fallback.StateOpen:
			b.victimOpen++
		case addr != b.victim && state != fallback.StateClosed:
			b.healthyNotClosed[addr] = state
		}
	}
}

// TestClusterBreakerPerPrimary: by default each front has a breaker per
// primary, as CLUSTER SLOTS maps the slots. A primary refusing writes
// opens its breaker only: every key of its slots is degraded, every key of
// the others' slots, whatever group of slots it falls in, is decided by
// Redis; when the primary takes writes again its keys come back. The
// breakers are looked at after every check: the victim's must be seen
// open, the others' closed every time. (At the end the victim's may be
// half-open: its probe interval, 200 ms, can pass during the 600 checks
// of a busy machine. Half-open comes only from open.)
func TestClusterBreakerPerPrimary(t *testing.T) {
	cl := testredis.StartCluster(t)
	rc := rueidisClient(t, cl.Addrs()...)
	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = gc.Close() })
	keys, owners := clusterKeys(t, cl, 600)
	victim := owners[keys[0]]
	opt := stack.WithFallback(quiet, fallback.WithPolicy(fallback.FailClosed), fallback.WithTimeout(10*time.Second),
		fallback.WithTripAfter(1), fallback.WithProbeInterval(200*time.Millisecond))
	gst, err := stack.NewGoRedis(gc, opt)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*stack.Stack{"rueidis": newStack(t, rc, opt), "go-redis": gst} {
		l := limiter(t, st)
		if _, err := nodeAt(cl, victim).Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
			t.Fatal(err)
		}
		var onVictim, elsewhere int
		looks := breakerLooks{victim: victim, healthyNotClosed: map[string]fallback.State{}}
		for _, k := range keys {
			r, err := l.Allow(bg, k, daily)
			looks.look(st.Primaries())
			switch {
			case err != nil:
				t.Fatalf("%s: %s: %v", name, k, err)
			case owners[k] == victim && !r.Source.Degraded():
				t.Errorf("%s: %s on the primary out of memory: %+v, want degraded", name, k, r)
			case owners[k] != victim && r.Source != ratewarden.SourceStore:
				t.Errorf("%s: %s on a healthy primary: %+v, want Redis' answer", name, k, r)
			case owners[k] == victim:
				onVictim++
			default:
				elsewhere++
			}
		}
		prim := st.Primaries()
		if len(prim) != 3 || (prim[victim] != fallback.StateOpen && prim[victim] != fallback.StateHalfOpen) {
			t.Errorf("%s: breakers by primary %v, want 3 with %s's open (or half-open: open, and its probe is due)", name, prim, victim)
		}
		if looks.victimOpen == 0 {
			t.Errorf("%s: the breaker of %s (out of memory) was never seen open in %d looks", name, victim, len(keys))
		}
		looks.look(prim)
		for addr, state := range looks.healthyNotClosed {
			t.Errorf("%s: breaker of healthy primary %s was seen %v", name, addr, state)
		}
		t.Logf("%s: %d keys on the failing primary degraded, %d on the others decided by Redis; the failing primary's breaker seen open after %d of %d checks, finally %v",
			name, onVictim, elsewhere, looks.victimOpen, len(keys), prim[victim])
		if _, err := nodeAt(cl, victim).Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
			t.Fatal(err)
		}
		testredis.WaitFor(t, 30*time.Second, func() string {
			if r, err := l.Allow(bg, keys[0], daily); err != nil || r.Source != ratewarden.SourceStore {
				return fmt.Sprintf("%s: %s after the primary recovered: %+v, %v", name, keys[0], r, err)
			}
			return ""
		})
	}
}

// TestClusterHotKey: 64 goroutines flood one key limited to 100 per hour
// through the default stack on a Cluster client, where checks are not
// batched. The deny cache (and its gate) keep the script calls to at most
// one per 100 rejected checks.
func TestClusterHotKey(t *testing.T) {
	cl := testredis.StartCluster(t)
	st := newStack(t, rueidisClient(t, cl.Addrs()...))
	l := limiter(t, st)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}
	for try := 0; ; try++ {
		key := "hot:" + strconv.Itoa(try)
		owner, err := cl.KeyOwner(st.Script().Key(key, lim))
		if err != nil {
			t.Fatal(err)
		}
		before, err := owner.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		const goroutines, perG = 64, 400
		var admitted, errs atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range perG {
					r, err := l.Allow(bg, key, lim)
					switch {
					case err != nil:
						errs.Add(1)
					case r.Allowed:
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		after, err := owner.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		if !time.Now().Truncate(lim.Period).Equal(start.Truncate(lim.Period)) && try < 2 {
			continue // straddled the window's end: again on a fresh key
		}
		calls, rejected := after-before, int64(goroutines*perG)-admitted.Load()
		t.Logf("%d checks of one key on a Cluster: %d admitted, %d script calls (%.4f per rejected check)",
			goroutines*perG, admitted.Load(), calls, float64(calls)/float64(rejected))
		if errs.Load() != 0 || admitted.Load() != 100 {
			t.Fatalf("%d errors, %d admitted; want 0 and 100", errs.Load(), admitted.Load())
		}
		if calls*100 > rejected {
			t.Errorf("%d script calls for %d rejected checks: want at most 1 per 100", calls, rejected)
		}
		return
	}
}
