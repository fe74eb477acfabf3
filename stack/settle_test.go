package stack_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/stack"
)

// Wait, Reserve and Acquire (issue 17) through the whole stack — failure
// policy, deny cache, leases, script store — on a real redis-server.

var hourly = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}

// count reads a fixed window's count from Redis, 0 when absent.
func count(t *testing.T, srv *testredis.Server, key string) int64 {
	t.Helper()
	v, err := srv.Do("GET", key)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("GET %s = %q, want a count", key, v)
	}
	return n
}

// withAndWithoutLeases runs fn on a stack without leases and on one with.
func withAndWithoutLeases(t *testing.T, fn func(t *testing.T, st *stack.Stack)) {
	srv := testredis.Start(t)
	c := rueidisClient(t, srv.Addr)
	t.Run("plain", func(t *testing.T) { fn(t, newStack(t, c)) })
	t.Run("leases", func(t *testing.T) {
		st := newStack(t, c, stack.WithLeases(lease.WithSize(5)))
		t.Cleanup(func() { _ = st.Close(bg) })
		fn(t, st)
	})
}

// Reservations are Redis': a bucket emptied by checks, its denial in the
// deny cache, still gives Wait a reservation at the next slot, and the
// cache remembers no denial of a reservation.
func TestWaitThroughStack(t *testing.T) {
	withAndWithoutLeases(t, func(t *testing.T, st *stack.Stack) {
		bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 1}
		key := "vendor:" + t.Name()
		l := limiter(t, st)
		start := time.Now() // Redis decides the first check after this
		if r, err := l.Allow(bg, key, bucket); err != nil || !r.Allowed {
			t.Fatalf("first check: %+v, %v", r, err)
		}
		for i := range 2 {
			r, err := l.Allow(bg, key, bucket)
			if err != nil || r.Allowed {
				t.Fatalf("check %d with the bucket empty: %+v, %v", i, r, err)
			}
		}
		remembered := st.DenyCache().Len()
		if remembered == 0 {
			t.Fatal("the deny cache remembered no denial")
		}

		// A run of reservations made at once: each is queued 100ms behind
		// the one before, on Redis' clock: the i-th at the first check's
		// instant + i × 100ms.
		res := make([]ratewarden.Result, 1)
		for i := 1; i <= 5; i++ {
			err := st.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{bucket}, Cost: 1, MaxDelay: time.Minute}, res)
			elapsed := time.Since(start)
			r := res[0]
			slot := time.Duration(i) * 100 * time.Millisecond
			if err != nil || !r.Allowed || r.Source != ratewarden.SourceStore || r.Delay > slot || r.Delay < slot-elapsed-time.Millisecond {
				t.Fatalf("reservation %d = %+v, %v; want Redis' admission %v ahead, less the %v since the first check", i, r, err, slot, elapsed)
			}
		}
		// One that would wait past MaxDelay is denied, and not remembered.
		err := st.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{bucket}, Cost: 1, MaxDelay: 100 * time.Millisecond}, res)
		if err != nil || res[0].Allowed || res[0].Source != ratewarden.SourceStore {
			t.Fatalf("reservation past MaxDelay = %+v, %v; want Redis' denial", res[0], err)
		}
		if n := st.DenyCache().Len(); n != remembered {
			t.Errorf("the deny cache holds %d denials, want %d: reservations are never remembered", n, remembered)
		}

		// Wait, from 4 goroutines: every admission from Redis, in its slot.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 4 {
			wg.Go(func() {
				for range 2 {
					r, err := l.Wait(bg, key, bucket)
					if err != nil || !r.Allowed || r.Source != ratewarden.SourceStore {
						errs <- fmt.Errorf("wait = %+v, %v; want Redis' admission", r, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// 8 more behind the 5 reserved above, one per 100ms: the last one's
		// slot is 1.3s after the first check.
		if took := time.Since(start); took < 1300*time.Millisecond-time.Millisecond {
			t.Errorf("the 8 waits were done %v after the first check, sooner than their slots", took)
		}
	})
}

// Reserve and Settle through the stack: Redis counts the actual costs,
// exactly, with settlements racing on every goroutine; a refundable check
// is never answered from the deny cache, and a refund makes the cache
// forget the key's denial.
func TestReserveThroughStack(t *testing.T) {
	srv := testredis.Start(t)
	c := rueidisClient(t, srv.Addr)
	for _, leased := range []bool{false, true} {
		t.Run(fmt.Sprint("leases=", leased), func(t *testing.T) {
			var opts []stack.Option
			if leased {
				opts = append(opts, stack.WithLeases(lease.WithSize(5)))
			}
			st := newStack(t, c, opts...)
			t.Cleanup(func() { _ = st.Close(bg) })
			l := limiter(t, st)
			key := "llm:" + t.Name()

			rv, err := l.Reserve(bg, key, 100, hourly)
			if err != nil || !rv.Allowed || rv.Results[0].Source != ratewarden.SourceStore {
				t.Fatalf("Reserve = %+v, %v", rv, err)
			}
			if s, err := rv.Settle(bg, 30); err != nil || s.Delta != -70 || s.Applied[0] != -70 {
				t.Fatalf("Settle(30) = %+v, %v; want 70 given back", s, err)
			}
			if n := count(t, srv, st.Script().Key(key, hourly)); n != 30 {
				t.Fatalf("count after settling 30 = %d", n)
			}
			rv, err = l.Reserve(bg, key, 100, hourly)
			if err != nil {
				t.Fatal(err)
			}
			if s, err := rv.Settle(bg, 130); err != nil || s.Applied[0] != 30 {
				t.Fatalf("Settle(130) = %+v, %v; want 30 more charged", s, err)
			}
			if n := count(t, srv, st.Script().Key(key, hourly)); n != 160 {
				t.Fatalf("count after settling 130 = %d, want 160", n)
			}

			// 8 goroutines × 10 reservations of 10, each settled at a random
			// actual cost: Redis ends at the sum.
			race := "race:" + t.Name()
			var wg sync.WaitGroup
			var actual atomic.Int64
			errs := make(chan error, 80)
			for g := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 10 {
						rv, err := l.Reserve(bg, race, 10, hourly)
						if err != nil || !rv.Allowed {
							errs <- fmt.Errorf("Reserve = %+v, %v", rv, err)
							continue
						}
						n := rng.Int64N(21)
						if _, err := rv.Settle(bg, n); err != nil {
							errs <- err
							continue
						}
						actual.Add(n)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := count(t, srv, st.Script().Key(race, hourly)); n != actual.Load() {
				t.Errorf("count after 80 racing settlements = %d, want their actual costs %d", n, actual.Load())
			}

			// The deny cache: a refundable check is Redis' alone, and a refund
			// forgets the local denial.
			small := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Hour}
			login := "login:" + t.Name()
			failed, err := l.Reserve(bg, login, 3, small)
			if err != nil || !failed.Allowed {
				t.Fatalf("Reserve(3) = %+v, %v", failed, err)
			}
			if r, err := l.AllowN(bg, login, small, 2); err != nil || !r.Allowed {
				t.Fatalf("AllowN(2) = %+v, %v", r, err)
			}
			for _, want := range []ratewarden.Source{ratewarden.SourceStore, ratewarden.SourceCache} {
				if r, err := l.Allow(bg, login, small); err != nil || r.Allowed || r.Source != want {
					t.Fatalf("Allow over the limit = %+v, %v; want denied by %v", r, err, want)
				}
			}
			if rv, err := l.Reserve(bg, login, 1, small); err != nil || rv.Allowed || rv.Results[0].Source != ratewarden.SourceStore {
				t.Errorf("Reserve over the limit = %+v, %v; want Redis' denial, not the cache's", rv, err)
			}
			if _, err := failed.Cancel(bg); err != nil { // the login succeeded after all
				t.Fatal(err)
			}
			if r, err := l.Allow(bg, login, small); err != nil || !r.Allowed || r.Source != ratewarden.SourceStore {
				t.Errorf("Allow after the refund = %+v, %v; want Redis' admission", r, err)
			}
		})
	}
}

// Acquire through the stack: 4 replicas (a client and a Stack each) × 8
// goroutines holding permits of max 3 never overlap more than 3 deep,
// measured by the test, and leave nothing in Redis.
func TestAcquireThroughStack(t *testing.T) {
	srv := testredis.Start(t)
	const max = 3
	var inFlight, peak, held atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	var key string
	for r := range 4 {
		var opts []stack.Option
		if r%2 == 1 {
			opts = append(opts, stack.WithLeases())
		}
		st := newStack(t, rueidisClient(t, srv.Addr), opts...)
		key = st.Script().PermitKey("jobs")
		l := limiter(t, st)
		for range 8 {
			wg.Go(func() {
				for range 5 {
					p, err := l.AcquireWait(bg, "jobs", max, time.Minute)
					if err != nil || !p.Acquired || p.Source != ratewarden.SourceStore {
						errs <- fmt.Errorf("AcquireWait = %+v, %v", p, err)
						return
					}
					n := inFlight.Add(1)
					for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
					}
					held.Add(1)
					time.Sleep(2 * time.Millisecond)
					inFlight.Add(-1)
					if err := p.Release(bg); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d permits held, at most %d at once", held.Load(), peak.Load())
	if peak.Load() > max || held.Load() != 4*8*5 {
		t.Errorf("%d permits held, peak %d; want 160, never more than %d at once", held.Load(), peak.Load(), max)
	}
	if n, err := srv.Do("EXISTS", key); err != nil || n != "0" {
		t.Errorf("EXISTS %s = %s, %v after every release; want 0", key, n, err)
	}
}

// Through an outage of the whole stack (Redis stopped): a reservation
// Redis admitted and settled meanwhile is written back, so Redis counts
// the actual cost; Acquire holds this replica's share; Wait is paced by
// the local share.
func TestStackOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: an outage under load; make test runs it")
	}
	srv := testredis.Start(t)
	st := newStack(t, rueidisClient(t, srv.Addr), stack.WithFallback(fallback.WithTimeout(2*time.Second),
		fallback.WithTripAfter(1), fallback.WithProbeInterval(100*time.Millisecond), fallback.WithGrace(0), fallback.WithReplicas(2)))
	l := limiter(t, st)
	key := st.Script().Key("tenant", hourly)
	rv, err := l.Reserve(bg, "tenant", 200, hourly)
	if err != nil || !rv.Allowed {
		t.Fatalf("Reserve = %+v, %v", rv, err)
	}
	held, err := l.Acquire(bg, "jobs", 4, time.Minute)
	if err != nil || !held.Acquired {
		t.Fatalf("Acquire = %+v, %v", held, err)
	}

	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = srv.Thaw()
		}
	}()
	testredis.WaitFor(t, 30*time.Second, func() string {
		if _, err := l.Peek(bg, "trip", hourly); err != nil {
			t.Fatalf("Peek while Redis is stopped: %v", err)
		}
		if s := st.State(); s != fallback.StateOpen {
			return "breaker " + s.String()
		}
		return ""
	})
	if s, err := rv.Settle(bg, 50); err != nil || s.Delta != -150 {
		t.Fatalf("Settle(50) while Redis is stopped = %+v, %v", s, err)
	}
	// The share of 4 permits between 2 replicas is 2.
	for i := range 3 {
		p, err := l.Acquire(bg, "jobs", 4, time.Minute)
		if err != nil || p.Source != ratewarden.SourceLocalFallback || p.Acquired != (i < 2) {
			t.Fatalf("Acquire %d while Redis is stopped = %+v, %v; want the share of 2", i, p, err)
		}
	}
	// The share of 20/s, burst 1, is 10/s: 6 waits take at least 500ms.
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 20, Period: time.Second, Burst: 1}
	start := time.Now()
	for range 6 {
		r, err := l.Wait(bg, "vendor", bucket)
		if err != nil || !r.Allowed || r.Source != ratewarden.SourceLocalFallback {
			t.Fatalf("Wait while Redis is stopped = %+v, %v", r, err)
		}
	}
	if took := time.Since(start); took < 500*time.Millisecond-time.Millisecond {
		t.Errorf("6 waits on the local share of 10/s took %v, want at least 500ms", took)
	}

	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	testredis.WaitFor(t, 30*time.Second, func() string {
		if _, err := l.Peek(bg, "probe", hourly); err != nil {
			t.Fatalf("Peek after the thaw: %v", err)
		}
		if n := count(t, srv, key); n != 50 {
			return fmt.Sprintf("count in Redis %d, want 50 (breaker %v)", n, st.State())
		}
		return ""
	})
	if err := held.Release(bg); err != nil {
		t.Errorf("Release of Redis' permit after the thaw: %v", err)
	}
}
