package fallback

// Reservations, settlements and concurrency limits (issue 17) against a
// real redis-server that is stopped (SIGSTOP) or killed, through the
// production redisstore.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// redisCount reads a fixed window's count from Redis, 0 when absent.
func redisCount(t *testing.T, srv *testredis.Server, key string) int64 {
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

// openUntil makes failing checks on fb until its breaker is open.
func openUntil(t *testing.T, fb *Store) {
	t.Helper()
	testredis.WaitFor(t, waitCap, func() string {
		if _, err := check(t, fb, "trip", trafficLimit, 0); err != nil { // cost 0: nothing to write back
			t.Fatalf("check while Redis is out: %v", err)
		}
		if st := fb.State(); st != StateOpen {
			return "breaker " + st.String()
		}
		return ""
	})
}

// A reservation Redis admitted, settled while Redis is stopped, and one the
// local share admitted and settled meanwhile: when Redis is back, the
// journal writes both back, and the count in Redis is the actual costs.
func TestSettleDuringRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: an outage under load; make test runs it")
	}
	srv := testredis.Start(t)
	rs := openRedisStore(t, srv.Addr)
	// A deadline a healthy call meets on a busy machine (the test needs
	// Redis' own answers before the freeze), and that a stopped Redis
	// reaches soon.
	fb := newStore(t, rs, WithLogger(testLogger(t)), WithTimeout(2*time.Second), WithTripAfter(1),
		WithProbeInterval(100*time.Millisecond), WithGrace(0))
	lim := newLimiter(t, fb)
	ctx := context.Background()
	key := rs.Key("tokens", perHour1000)

	before, err := lim.Reserve(ctx, "tokens", 100, perHour1000)
	if err != nil || !before.Allowed || before.Results[0].Source != ratewarden.SourceStore {
		t.Fatalf("Reserve on a healthy Redis = %+v, %v", before, err)
	}
	if n := redisCount(t, srv, key); n != 100 {
		t.Fatalf("count after reserving 100 = %d", n)
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
	openUntil(t, fb)
	st, err := before.Settle(ctx, 30)
	if err != nil || st.Delta != -70 || st.Applied[0] != 0 {
		t.Fatalf("Settle(30) while Redis is stopped = %+v, %v; want 70 to give back, none of it applied locally", st, err)
	}
	during, err := lim.Reserve(ctx, "tokens", 50, perHour1000)
	if err != nil || !during.Allowed || during.Results[0].Source != ratewarden.SourceLocalFallback {
		t.Fatalf("Reserve while Redis is stopped = %+v, %v; want the local share's", during, err)
	}
	if st, err := during.Settle(ctx, 10); err != nil || st.Applied[0] != -40 {
		t.Fatalf("Settle(10) of the local reservation = %+v, %v; want 40 given back locally", st, err)
	}

	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	const want = 30 + 10
	testredis.WaitFor(t, waitCap, func() string {
		if _, err := check(t, fb, "probe", trafficLimit, 0); err != nil {
			t.Fatalf("check after the thaw: %v", err)
		}
		if n := redisCount(t, srv, key); n != want {
			return fmt.Sprintf("count in Redis %d, want %d (breaker %v)", n, want, fb.State())
		}
		return ""
	})
	time.Sleep(200 * time.Millisecond) // nothing more arrives
	if n := redisCount(t, srv, key); n != want {
		t.Errorf("count in Redis settled at %d, want %d: the actual costs", n, want)
	}
	if n := fb.Reconciled(); n != 50 {
		t.Errorf("Reconciled = %d, want 50 (the local admission)", n)
	}
}

// With Redis killed, LocalFallback holds at most this replica's share of
// a concurrency limit, however many callers try at once; once Redis is
// back (empty), permits are Redis' again.
func TestAcquireDuringRedisOutage(t *testing.T) {
	srv := testredis.Start(t)
	rs := openRedisStore(t, srv.Addr)
	// A killed Redis refuses at once: the deadline only has to let every
	// healthy call through.
	fb := newStore(t, rs, WithLogger(testLogger(t)), WithTimeout(healthyTimeout), WithReplicas(4), WithTripAfter(1), WithProbeInterval(100*time.Millisecond))
	lim := newLimiter(t, fb)
	ctx := context.Background()
	const max, ttl = 10, time.Minute

	held, err := lim.Acquire(ctx, "jobs", max, ttl)
	if err != nil || !held.Acquired || held.Source != ratewarden.SourceStore {
		t.Fatalf("Acquire on a healthy Redis = %+v, %v", held, err)
	}
	srv.Kill()
	openUntil(t, fb)

	var wg sync.WaitGroup
	var acquired, refused, inFlight, peak atomic.Int64
	var mu sync.Mutex
	var permits []*ratewarden.Permit
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			p, err := lim.Acquire(ctx, "jobs", max, ttl)
			switch {
			case err != nil:
				errs <- err
			case p.Source != ratewarden.SourceLocalFallback:
				errs <- fmt.Errorf("permit from %v, want local_fallback", p.Source)
			case p.Acquired:
				acquired.Add(1)
				n := inFlight.Add(1)
				for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
				}
				mu.Lock()
				permits = append(permits, p)
				mu.Unlock()
			default:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	share := int64(max / 4)
	if acquired.Load() != share || refused.Load() != 32-share || peak.Load() != share {
		t.Fatalf("32 callers during the outage: %d acquired (peak %d), %d refused; want the share of %d", acquired.Load(), peak.Load(), refused.Load(), share)
	}
	// A local permit is released locally; the one Redis holds cannot be.
	if err := permits[0].Release(ctx); err != nil {
		t.Errorf("Release of a local permit: %v", err)
	}
	if p, err := lim.Acquire(ctx, "jobs", max, ttl); err != nil || !p.Acquired || p.Source != ratewarden.SourceLocalFallback {
		t.Errorf("Acquire after a local release = %+v, %v", p, err)
	}
	if err := held.Release(ctx); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Errorf("Release of Redis' permit while Redis is down = %v, want ErrStoreUnavailable", err)
	}

	srv.Restart(t)
	testredis.WaitFor(t, waitCap, func() string {
		p, err := lim.Acquire(ctx, "jobs", max, ttl)
		if err != nil {
			t.Fatalf("Acquire after the restart: %v", err)
		}
		if p.Source != ratewarden.SourceStore {
			_ = p.Release(ctx)
			return fmt.Sprintf("permit from %v (breaker %v)", p.Source, fb.State())
		}
		return ""
	})
	if n, err := srv.Do("ZCARD", rs.PermitKey("jobs")); err != nil || n != "1" {
		t.Errorf("ZCARD after the restart = %s, %v; want the one permit taken since", n, err)
	}
}

// Limiter.Wait while Redis is killed is paced by this replica's share: 20
// waits on a bucket of 20/s, burst 1, shared by 2 replicas take at least
// 19 × 100ms, whoever waits.
func TestWaitDuringRedisOutage(t *testing.T) {
	srv := testredis.Start(t)
	rs := openRedisStore(t, srv.Addr)
	fb := newStore(t, rs, WithLogger(testLogger(t)), WithReplicas(2), WithTripAfter(1))
	lim := newLimiter(t, fb)
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 20, Period: time.Second, Burst: 1}
	srv.Kill()
	openUntil(t, fb)

	const waiters, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, waiters*each)
	start := time.Now()
	for range waiters {
		wg.Go(func() {
			for range each {
				r, err := lim.Wait(context.Background(), "vendor", bucket)
				switch {
				case err != nil:
					errs <- err
				case !r.Allowed || r.Source != ratewarden.SourceLocalFallback:
					errs <- fmt.Errorf("wait = %+v, want the local share's admission", r)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The share's 10/s admits one at once, then one per 100ms; its clock
	// counts in microseconds, so allow one per admission.
	least := (waiters*each-1)*100*time.Millisecond - waiters*each*time.Microsecond
	t.Logf("%d waits on the local share of 10/s took %v (at least %v)", waiters*each, took, least)
	if took < least {
		t.Errorf("%d waits took %v: faster than the share of 10/s allows (%v)", waiters*each, took, least)
	}
	if took > least+waitCap {
		t.Errorf("%d waits took %v, want about %v", waiters*each, took, least)
	}
}
