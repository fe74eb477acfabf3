package lease

import (
	"errors"
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
	"github.com/redis/go-redis/v9"
)

// warm loads both scripts into Redis (a first EVALSHA fails with NOSCRIPT
// and is followed by EVAL: two calls), so that counts that follow are one
// call per script execution.
func warm(tb testing.TB, l *Store) {
	tb.Helper()
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Second}
	check(tb, l.inner, "warm:check", 1, false, lim)
	check(tb, l, "warm:lease", 1, false, lim)
	if err := l.Reset(bg, "warm:lease", lim); err != nil {
		tb.Fatal(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	for _, tc := range []struct {
		name  string
		store *redisstore.Store
		opts  []Option
		want  string
	}{
		{"nil store", nil, nil, "store"},
		{"nil option", s, []Option{WithSize(5), nil}, "lease: option 1 is nil"},
		{"zero size", s, []Option{WithSize(0)}, "size must be at least 1"},
		{"nil filter", s, []Option{WithFilter(nil)}, "filter"},
		{"zero max", s, []Option{WithMaxLeases(0)}, "max leases"},
	} {
		l, err := New(tc.store, tc.opts...)
		if l != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v; want ErrInvalidConfig naming %q", tc.name, l, err, tc.want)
		}
	}
}

// A lease takes units from the very counter plain checks use, in their
// format and with their expiry; its units are then used without Redis.
func TestLeaseFixedWindowSharesTheCounter(t *testing.T) {
	srv := testredis.Start(t)
	plain, l := openLease(t, srv.Addr, WithSize(4))
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
	key := plain.Key("k", lim)
	warm(t, l)

	before := scriptCalls(t, srv)
	r := check(t, l, "k", 1, false, lim)[0]
	if !r.Allowed || r.Source != ratewarden.SourceStore || r.Remaining != 9 {
		t.Fatalf("first check = %+v, want admitted by the script, 9 left", r)
	}
	if n := windowCount(t, srv, key); n != 4 {
		t.Fatalf("count after a lease of 4 = %d", n)
	}
	pttl, _ := strconv.ParseInt(do(t, srv, "PTTL", key), 10, 64)
	if pttl <= 0 || pttl > time.Hour.Milliseconds() {
		t.Errorf("PTTL after a lease = %d ms, want in (0, 1h]", pttl)
	}
	// The same state as a plain check of cost 4 in this window.
	check(t, plain, "other", 4, false, lim)
	if a, b := do(t, srv, "GET", key), do(t, srv, "GET", plain.Key("other", lim)); a != b {
		t.Errorf("lease state %q, plain check state %q", a, b)
	}
	if a, b := do(t, srv, "PEXPIRETIME", key), do(t, srv, "PEXPIRETIME", plain.Key("other", lim)); a != b {
		t.Errorf("lease expires at %s, plain check at %s", a, b)
	}
	if n := scriptCalls(t, srv) - before; n != 2 {
		t.Fatalf("%d script calls, want 2", n)
	}
	before = scriptCalls(t, srv)
	for i := range 3 {
		r := check(t, l, "k", 1, false, lim)[0]
		// Remaining: the lease's units left plus the 6 Redis had beyond it.
		if !r.Allowed || r.Source != ratewarden.SourceLease || r.Remaining != int64(2-i)+6 {
			t.Errorf("leased check %d = %+v, want a local admission with %d remaining", i, r, 8-i)
		}
	}
	if r := check(t, l, "k", 1, true, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceStore || r.Remaining != 6 {
		t.Errorf("peek with an empty lease and 6 left in Redis = %+v, want Redis' admission", r)
	}
	if n := scriptCalls(t, srv) - before; n != 1 {
		t.Errorf("%d script calls for 3 leased checks and a peek, want 1 (the peek)", n)
	}
	// A plain check sees the leased units as taken.
	if r := check(t, plain, "k", 0, true, lim)[0]; r.Remaining != 6 {
		t.Errorf("plain peek remaining = %d, want 6", r.Remaining)
	}
}

func TestLeasePassesThroughWhatItDoesNotLease(t *testing.T) {
	srv := testredis.Start(t)
	fw := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}
	sw := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Hour}
	other := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 50, Period: time.Minute}
	_, l := openLease(t, srv.Addr, WithSize(10), WithFilter(func(l ratewarden.Limit) bool { return l.Period == time.Hour }))
	warm(t, l)
	for _, tc := range []struct {
		name   string
		cost   int64
		limits []ratewarden.Limit
	}{
		{"sliding window", 1, []ratewarden.Limit{sw}},
		{"not selected", 1, []ratewarden.Limit{other}},
		{"multi-limit", 1, []ratewarden.Limit{fw, other}},
		{"cost 0", 0, []ratewarden.Limit{fw}},
	} {
		before := scriptCalls(t, srv)
		for range 3 {
			for _, r := range check(t, l, "k:"+tc.name, tc.cost, false, tc.limits...) {
				if !r.Allowed || r.Source != ratewarden.SourceStore {
					t.Errorf("%s: %+v, want the store's admission", tc.name, r)
				}
			}
		}
		if n := scriptCalls(t, srv) - before; n != 3 {
			t.Errorf("%s: %d script calls for 3 checks, want 3 (plain)", tc.name, n)
		}
	}
	if n := l.Leases(); n != 0 {
		t.Errorf("Leases = %d, want 0", n)
	}
	// Bad input is rejected before Redis: by the Limiter, which validates
	// every request once (a lease Store relies on it, as every Store
	// does), and by the lease script's call, which checks its own
	// arguments.
	lm, err := ratewarden.New(l)
	if err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, srv)
	if _, err := lm.AllowN(bg, "k", fw, 101); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Errorf("cost above capacity: %v", err)
	}
	if _, err := lm.Allow(bg, "", fw); !errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	if err := lm.Reset(bg, "", fw); !errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Errorf("Reset empty key: %v", err)
	}
	res := make([]ratewarden.Result, 1)
	if err := l.Check(bg, &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{fw}, Cost: 101}, res); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Errorf("Check with a cost above capacity: %v", err)
	}
	if n := scriptCalls(t, srv) - before; n != 0 {
		t.Errorf("bad input made %d script calls", n)
	}
}

// Close gives unused fixed-window units back: the count is then exactly
// what was admitted.
func TestLeaseCloseGivesBack(t *testing.T) {
	srv := testredis.Start(t)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	var leasers []*Store
	var plain *redisstore.Store
	for range 4 {
		s, l := openLease(t, srv.Addr, WithSize(30))
		plain, leasers = s, append(leasers, l)
	}
	admitted := 0
	for i := range 4 * 55 {
		if r := check(t, leasers[i%4], "k", 1, false, lim)[0]; r.Allowed {
			admitted++
		}
	}
	key := plain.Key("k", lim)
	if n := windowCount(t, srv, key); admitted != 220 || n != 4*60 {
		t.Fatalf("admitted %d, count %d; want 220 admitted, 240 counted (4 × 2 leases of 30)", admitted, n)
	}
	for _, l := range leasers {
		if err := l.Close(bg); err != nil {
			t.Fatal(err)
		}
	}
	if n := windowCount(t, srv, key); n != 220 {
		t.Errorf("count after Close = %d, want 220", n)
	}
	// Closed: checks are plain.
	if r := check(t, leasers[0], "k", 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceStore || r.Remaining != 779 {
		t.Errorf("check after Close = %+v, want a plain admission, 779 left", r)
	}
}

func TestLeaseReset(t *testing.T) {
	srv := testredis.Start(t)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
	plain, l := openLease(t, srv.Addr, WithSize(10))
	for range 10 {
		check(t, l, "k", 1, false, lim)
	}
	if r := check(t, l, "k", 1, false, lim)[0]; r.Allowed || r.Source != ratewarden.SourceStore {
		t.Fatalf("11th = %+v, want Redis' denial", r)
	}
	if r := check(t, l, "k", 1, false, lim)[0]; r.Allowed || r.Source != ratewarden.SourceCache || r.RetryAfter <= 0 {
		t.Fatalf("12th = %+v, want the remembered denial", r)
	}
	if err := l.Reset(bg, "k", lim); err != nil {
		t.Fatal(err)
	}
	if got := do(t, srv, "EXISTS", plain.Key("k", lim)); got != "0" {
		t.Fatalf("key exists after Reset: %s", got)
	}
	if r := check(t, l, "k", 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceStore || r.Remaining != 9 {
		t.Errorf("after Reset = %+v, want a fresh lease", r)
	}
}

// Token-bucket units may be used only until the instant GCRA would have
// admitted them; later the Leaser asks Redis again. The checks that need
// the first calls to come quickly (within one unit's interval) tell when
// they did not, and the test runs again with a period twice as long.
func TestLeaseTokenBucketUnitsExpire(t *testing.T) {
	srv := testredis.Start(t)
	plain, l := openLease(t, srv.Addr, WithSize(3))
	warm(t, l)
	var lates []string
	for attempt, period := range []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second} {
		late := leaseUnitsExpire(t, srv, plain, l, "k"+strconv.Itoa(attempt), period)
		if late == "" {
			return
		}
		lates = append(lates, late)
	}
	t.Fatalf("too slow to check, in every attempt (is the machine overloaded?): %q", lates)
}

func leaseUnitsExpire(t *testing.T, srv *testredis.Server, plain *redisstore.Store, l *Store, key string, period time.Duration) (late string) {
	// One unit per period/5 (800 ms at 4 s).
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: period, Burst: 5}
	unit := period / 5
	before := scriptCalls(t, srv)
	start := time.Now()
	if r := check(t, l, key, 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
		t.Fatalf("first = %+v", r)
	}
	// Units 1 and 2 are usable until one and two units after the first.
	if r := check(t, l, key, 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceLease {
		if took := time.Since(start); took >= unit {
			return fmt.Sprintf("period %v: the second check came %v after the first, past unit 1's instant", period, took)
		}
		t.Fatalf("second (at once) = %+v, want a local admission", r)
	}
	if n := scriptCalls(t, srv) - before; n != 1 {
		t.Fatalf("%d script calls, want 1", n)
	}
	// The lease moved the TAT by 3 units ahead of the first check's
	// instant, which was at most elapsed ago.
	tat := bucketTAT(t, srv, plain.Key(key, lim))
	ahead := time.Duration(tat-redisTime(t, srv)) * time.Microsecond
	elapsed := time.Since(start)
	if elapsed >= unit {
		return fmt.Sprintf("period %v: the TAT was read %v after the first check: 3 units ahead cannot be told from 2", period, elapsed)
	}
	if ahead > 3*unit || ahead <= 3*unit-elapsed-time.Millisecond {
		t.Errorf("TAT %v ahead of now, %v after the first check; want in (3 units − %[2]v, 3 units] (a unit is %v)", ahead, elapsed, unit)
	}
	time.Sleep(2*unit + unit/4) // unit 2's instant has passed
	if r := check(t, l, key, 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
		t.Errorf("after 2¼ units = %+v, want a new lease from Redis", r)
	}
	if n := scriptCalls(t, srv) - before; n != 2 {
		t.Errorf("%d script calls, want 2", n)
	}
	return ""
}

// hotKey runs instances × goroutines × perG checks of one key, each
// instance a Store (or Leaser) on a client of its own, and returns the
// admitted count and the script calls Redis served.
func hotKey(t *testing.T, srv *testredis.Server, stores []ratewarden.Store, key string, lim ratewarden.Limit, goroutines, perG int) (admitted, calls int64) {
	t.Helper()
	var wg sync.WaitGroup
	var a atomic.Int64
	errs := make(chan error, len(stores)*goroutines)
	before := scriptCalls(t, srv)
	for _, st := range stores {
		lm, err := ratewarden.New(st)
		if err != nil {
			t.Fatal(err)
		}
		for range goroutines {
			wg.Go(func() {
				for range perG {
					r, err := lm.Allow(bg, key, lim)
					if err != nil {
						errs <- err
						return
					}
					if r.Allowed {
						a.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return a.Load(), scriptCalls(t, srv) - before
}

// TestLeaseHotKeyFourInstances: 4 instances flood one key. With leases
// they never admit more than the limit and make at least 5× fewer script
// calls than plain checks. They may admit less: an instance whose
// goroutines run out of checks while it still holds leased units leaves
// them unused — at most one lease per instance.
func TestLeaseHotKeyFourInstances(t *testing.T) {
	srv := testredis.Start(t)
	const instances, goroutines, perG = 4, 16, 40 // 2560 checks
	for _, tc := range []struct {
		lim ratewarden.Limit
		max int64 // admitted at most (a token bucket refills ~0 during the test)
		min int64
	}{
		{ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}, 1000, 1000},
		{ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1000, Period: 24 * time.Hour}, 1001, 900},
	} {
		t.Run(tc.lim.Algorithm.String(), func(t *testing.T) {
			var plain, leased []ratewarden.Store
			for range instances {
				plain = append(plain, openStore(t, srv.Addr))
				_, l := openLease(t, srv.Addr, WithSize(50))
				leased = append(leased, l)
			}
			pa, pc := hotKey(t, srv, plain, "plain", tc.lim, goroutines, perG)
			la, lc := hotKey(t, srv, leased, "leased", tc.lim, goroutines, perG)
			t.Logf("%v, %d checks on %d instances: plain admitted %d in %d script calls; leases of 50 admitted %d in %d script calls (%.1fx fewer)",
				tc.lim, instances*goroutines*perG, instances, pa, pc, la, lc, float64(pc)/float64(lc))
			if pa < tc.min || pa > tc.max {
				t.Errorf("plain admitted %d, want in [%d, %d]", pa, tc.min, tc.max)
			}
			if leaseMin := tc.min - instances*50; la < leaseMin || la > tc.max {
				t.Errorf("leases admitted %d, want in [%d, %d] (at most one unused lease of 50 per instance)", la, leaseMin, tc.max)
			}
			if lc == 0 || pc < 5*lc {
				t.Errorf("script calls: plain %d, leases %d; want at least 5x fewer", pc, lc)
			}
		})
	}
}

// The Leaser works on a go-redis client too.
func TestLeaseGoRedis(t *testing.T) {
	srv := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.NewGoRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(s, WithSize(5))
	if err != nil {
		t.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 7, Period: time.Hour}
	var got []ratewarden.Source
	admitted := 0
	for range 9 {
		r := check(t, l, "k", 1, false, lim)[0]
		got = append(got, r.Source)
		if r.Allowed {
			admitted++
		}
	}
	const store, lease, cache = ratewarden.SourceStore, ratewarden.SourceLease, ratewarden.SourceCache
	want := []ratewarden.Source{store, lease, lease, lease, lease, store, lease, store, cache}
	if admitted != 7 || len(got) != len(want) {
		t.Fatalf("admitted %d, sources %v", admitted, got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sources %v, want %v", got, want)
		}
	}
	if err := l.Close(bg); err != nil {
		t.Fatal(err)
	}
	if n := windowCount(t, srv, s.Key("k", lim)); n != 7 {
		t.Errorf("count after Close = %d, want 7", n)
	}
}

// TestLeaseUnderAdmission measures the trade-off: replicas that hold
// unused units make the busy replica deny early, by exactly those units,
// until they give them back.
func TestLeaseUnderAdmission(t *testing.T) {
	srv := testredis.Start(t)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	var ls []*Store
	for range 4 {
		_, l := openLease(t, srv.Addr, WithSize(50))
		ls = append(ls, l)
	}
	admitted := 0
	for _, l := range ls[1:] { // three quiet replicas: 10 checks each
		for range 10 {
			if check(t, l, "k", 1, false, lim)[0].Allowed {
				admitted++
			}
		}
	}
	busy := 0
	for range 1200 {
		if check(t, ls[0], "k", 1, false, lim)[0].Allowed {
			busy++
		}
	}
	t.Logf("leases of 50, 4 replicas: quiet replicas admitted %d, the busy one %d: %d of 1000 (%d held unused)", admitted, busy, admitted+busy, 1000-admitted-busy)
	if admitted != 30 || busy != 1000-30-3*40 {
		t.Fatalf("admitted %d + %d, want 30 + %d", admitted, busy, 1000-30-3*40)
	}
	for _, l := range ls[1:] {
		if err := l.Close(bg); err != nil {
			t.Fatal(err)
		}
	}
	more := 0
	for range 200 {
		if check(t, ls[0], "k", 1, false, lim)[0].Allowed {
			more++
		}
	}
	// The busy replica remembered Redis' denial until the window ends; a
	// plain check on a fresh Leaser sees the given-back units.
	if more != 0 {
		t.Errorf("busy replica admitted %d after the give-back, want 0 (it remembers the denial)", more)
	}
	_, fresh := openLease(t, srv.Addr, WithSize(50))
	for range 200 {
		if check(t, fresh, "k", 1, false, lim)[0].Allowed {
			more++
		}
	}
	if more != 3*40 {
		t.Errorf("after the quiet replicas closed, %d more admitted, want %d", more, 3*40)
	}
}

// BenchmarkHotKey: one key, 1e12 per hour (never denied), checked from
// parallel goroutines on one Store: plain checks against leases.
func BenchmarkHotKey(b *testing.B) {
	srv := testredis.Start(b)
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: ratewarden.MaxRate, Period: time.Hour}
	run := func(b *testing.B, st ratewarden.Store) {
		lm, err := ratewarden.New(st)
		if err != nil {
			b.Fatal(err)
		}
		before := scriptCalls(b, srv)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r, err := lm.Allow(bg, "hot", lim); err != nil || !r.Allowed {
					b.Errorf("%+v, %v", r, err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(scriptCalls(b, srv)-before)/float64(b.N), "calls/op")
	}
	b.Run("plain", func(b *testing.B) { run(b, openStore(b, srv.Addr)) })
	for _, size := range []int64{10, 50, 200} {
		b.Run("lease"+strconv.FormatInt(size, 10), func(b *testing.B) {
			_, l := openLease(b, srv.Addr, WithSize(size))
			run(b, l)
		})
	}
}
