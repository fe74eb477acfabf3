package fallback

// The failure-truth acceptance tests: replicas in processes of their own
// (procs_test.go) against a real redis-server, faults injected by a wrong
// type under a key, maxmemory, SIGSTOP and busy loops.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
)

func openRedisStore(t *testing.T, addr string) *redisstore.Store {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	rs, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func healthyDegraded(r *replicaReport) (degraded, total int64) {
	for src, n := range r.Healthy {
		total += n
		if src != ratewarden.SourceStore.String() {
			degraded += n
		}
	}
	return degraded, total
}

// A key holding another type carries a fifth of the traffic of 4 replica
// processes under FailClosed: its callers get the policy's answer, the
// breaker never opens, and no other key is degraded for it.
func TestBadKeyStaysItsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: replica processes under load; make test runs it")
	}
	srv := testredis.Start(t)
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Minute}
	rs := openRedisStore(t, srv.Addr)
	if _, err := srv.Do("HSET", rs.Key("bad", lim), "not", "a window"); err != nil {
		t.Fatal(err)
	}
	// A deadline no busy machine misses: every degraded answer for a
	// healthy key, and every trip, is then the bad key's doing. (Before
	// ErrKeyState, 5 bad-key checks in a row opened the breaker.)
	reps := runReplicas(t, 4, replicaJob{
		Addr: srv.Addr, Policy: FailClosed, Callers: 16, Limit: lim.String(),
		Start: time.Now().Add(2 * time.Second), Duration: 5 * time.Second,
		Keys: 64, BadKey: "bad", BadEvery: 5, Timeout: healthyTimeout,
	})
	tot := sum(reps)
	deg, healthy := healthyDegraded(tot)
	t.Logf("%d checks: %d for healthy keys (%d degraded), bad key answered %v; causes %v; key state errors %d; breaker opened %d times",
		tot.Checks, healthy, deg, tot.Bad, tot.Causes, tot.KeyStateErrors, tot.Opened)
	if tot.Errors != 0 {
		t.Errorf("%d errors to callers, first: %s", tot.Errors, tot.FirstError)
	}
	if tot.Opened != 0 || tot.Causes["open"] != 0 {
		t.Errorf("the breaker opened %d times (%d answers by it): a key's bad state must not count", tot.Opened, tot.Causes["open"])
	}
	var bad int64
	for src, n := range tot.Bad {
		bad += n
		if src != ratewarden.SourceFailClosed.String() {
			t.Errorf("%d answers for the bad key came from %s, want fail_closed", n, src)
		}
	}
	if bad == 0 || tot.KeyStateErrors != bad || tot.Causes["key_state"] != bad {
		t.Errorf("bad key: %d answers, %d key state errors, %d degraded by key_state; want them equal and > 0", bad, tot.KeyStateErrors, tot.Causes["key_state"])
	}
	if deg != 0 {
		t.Errorf("%d of %d healthy answers degraded (causes %v): want none", deg, healthy, tot.Causes)
	}
}

// Redis out of memory fails every write: an error naming it, without the
// caller's key, that counts toward the breaker, which opens (the store is
// down for everyone) and closes once Redis takes writes again.
func TestOutOfMemory(t *testing.T) {
	srv := testredis.Start(t)
	var mu sync.Mutex
	var causes []string
	s := newStore(t, openRedisStore(t, srv.Addr), WithPolicy(FailClosed), WithTimeout(healthyTimeout), WithProbeInterval(200*time.Millisecond),
		WithLogger(testLogger(t)), WithOnDegraded(func(_ Policy, cause error) {
			mu.Lock()
			causes = append(causes, cause.Error())
			mu.Unlock()
		}))
	lim := ratewarden.PerMinute(1000)
	mustCheck(t, s, "secret-key", lim, 1)
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	for i := 0; s.State() != StateOpen; i++ {
		if i == 100 {
			t.Fatalf("breaker still %v after 100 checks on a Redis out of memory", s.State())
		}
		if r := mustCheck(t, s, "secret-key", lim, 1); r.Source != ratewarden.SourceFailClosed {
			t.Fatalf("check %d out of memory: %+v, want fail_closed", i, r)
		}
	}
	mu.Lock()
	first := causes[0]
	mu.Unlock()
	if !strings.Contains(first, "out of memory") || !strings.Contains(first, "OOM") || strings.Contains(first, "secret") || strings.Contains(first, "malformed") {
		t.Errorf("cause %q: want Redis' OOM named, without the key", first)
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	waitStore(t, s, lim, waitCap)
}

// The breaker trips on evidence, not on a busy machine: 4 replica
// processes of 64 callers each on a healthy Redis while two busy loops
// take the CPUs. Under the default rule (5 failed round trips in a row, or
// half of 20 in 10s) it opens only when the machine left a replica, or
// Redis, without a CPU for about 4 timeouts (starved): that looks to the
// breaker like a stalled Redis. And at most 0.5% of the other answers are
// degraded: lone timeouts of a starved process (docs/failure.md). The
// replicas are built without the race detector, as a service is (see
// plainBinary); each measures how late a 10 ms ticker fires at worst, and
// the test how long Redis takes to answer a PING (every 10 ms) at worst.
func TestBusyHostNoTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 4 replica processes beside two busy loops; make test runs it")
	}
	const starved = 4 * DefaultTimeout
	bin := plainBinary(t)
	srv := testredis.Start(t)
	for range 2 {
		hog := exec.Command("yes")
		if err := hog.Start(); err != nil {
			t.Fatalf("busy loop: %v", err)
		}
		t.Cleanup(func() { _ = hog.Process.Kill(); _ = hog.Wait() })
	}
	job := replicaJob{
		Addr: srv.Addr, Policy: FailClosed, Callers: 64, Limit: ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Minute}.String(),
		Start: time.Now().Add(3 * time.Second), Duration: 4 * time.Second, Keys: 1024,
	}
	redisWorst := watchPing(t, srv.Addr, job.Start, job.Start.Add(job.Duration))
	reps := runReplicasOf(t, bin, 4, job)
	pingWorst := <-redisWorst
	tot := sum(reps)
	deg, healthy := healthyDegraded(tot)
	open := tot.Causes["open"]
	t.Logf("%d checks in 4s from 4×64 callers beside two busy loops: %d degraded (%d by an open breaker), causes %v, breaker opened %d times; the longest a process went without a CPU: %v; Redis' slowest PING: %v",
		healthy, deg, open, tot.Causes, tot.Opened, tot.MaxStall, pingWorst)
	if tot.Errors != 0 {
		t.Errorf("%d errors to callers, first: %s", tot.Errors, tot.FirstError)
	}
	if healthy == 0 {
		t.Fatal("no checks ran")
	}
	for i, r := range reps {
		if r.Opened != 0 && r.MaxStall < starved && pingWorst < starved {
			t.Errorf("replica %d: the breaker opened %d times on a healthy Redis, though neither the replica (late by %v at worst) nor Redis (slowest PING %v) went %v without a CPU (docs/failure.md)",
				i, r.Opened, r.MaxStall, pingWorst, starved)
		}
		if r.Opened == 0 && r.Causes["open"] != 0 {
			t.Errorf("replica %d: %d answers by an open breaker that never opened", i, r.Causes["open"])
		}
	}
	if other := healthy - open; (deg-open)*200 > other {
		t.Errorf("%d of the %d answers not given by an open breaker (%.4f%%) degraded on a healthy Redis, causes %v; docs/failure.md: at most 0.5%%",
			deg-open, other, 100*float64(deg-open)/float64(other), tot.Causes)
	}
}

// watchPing sends Redis at addr a PING every 10 ms from from to until,
// on a connection of its own, and then sends the slowest answer's round
// trip.
func watchPing(t *testing.T, addr string, from, until time.Time) <-chan time.Duration {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan time.Duration, 1)
	go func() {
		defer c.Close()
		var worst time.Duration
		time.Sleep(time.Until(from))
		for time.Now().Before(until) {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.Do(ctx, c.B().Ping().Build()).Error()
			cancel()
			took := time.Since(start)
			if err != nil {
				took = max(took, 10*time.Second) // no answer: as slow as it gets
			}
			worst = max(worst, took)
			time.Sleep(10 * time.Millisecond)
		}
		out <- worst
	}()
	return out
}

// plainBinary returns a build of this package's tests without the race
// detector when the test runs with it, or "" when the test binary itself
// is one: a service is not race-built, and a race-built check costs
// several times the CPU, so that 4 × 64 callers spinning on 2 cores miss
// the 50 ms deadline by their own queueing (9 runs under -race at load
// average 5 to 13: 0.08% to 37% of the answers degraded, 2 of them with
// the breaker open in 3 of the 4 replicas).
func plainBinary(t *testing.T) string {
	t.Helper()
	if !raceBuild {
		return ""
	}
	bin := filepath.Join(t.TempDir(), "fallback.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the replicas without -race: %v\n%s", err, out)
	}
	return bin
}

// runReplicasOf is runReplicas with the replicas run from bin (from
// plainBinary; "" is the test binary itself). The child protocol is
// internal/childproc's: the job in RATEWARDEN_CHILD_JOB, the report as
// JSON on stdout.
func runReplicasOf(t *testing.T, bin string, n int, job replicaJob) []*replicaReport {
	t.Helper()
	if bin == "" {
		return runReplicas(t, n, job)
	}
	spec, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	reps, errs := make([]*replicaReport, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Until(job.Start)+job.Duration+2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
			cmd.Env = append(os.Environ(), "RATEWARDEN_CHILD_JOB="+string(spec))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err == nil {
				reps[i] = new(replicaReport)
				err = json.Unmarshal(out, reps[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("replica %d: %w; stdout %q; stderr:\n%s", i, err, out, stderr.String())
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return reps
}

// A caller who cancels while Redis is stopped gets its context's error at
// once, whatever WithTimeout says, and the breaker does not count it.
func TestCancelWhileStopped(t *testing.T) {
	srv := testredis.Start(t)
	s := newStore(t, openRedisStore(t, srv.Addr), WithPolicy(FailClosed), WithTimeout(2*time.Second), WithTripAfter(1))
	lim := ratewarden.PerMinute(1000)
	for range 300 {
		mustCheck(t, s, "warm", lim, 1)
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
	var lags []time.Duration
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		var at atomic.Int64
		timer := time.AfterFunc(20*time.Millisecond, func() { at.Store(time.Now().UnixNano()); cancel() })
		res := make([]ratewarden.Result, 1)
		err := s.Check(ctx, &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{lim}, Cost: 1}, res)
		back := time.Now()
		timer.Stop()
		if at.Load() == 0 {
			t.Fatalf("check %d returned before its cancel: %v %+v", i, err, res[0])
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("check %d: %v, want context.Canceled", i, err)
		}
		lags = append(lags, back.Sub(time.Unix(0, at.Load())))
	}
	slices.Sort(lags)
	p99 := lags[len(lags)*99/100]
	t.Logf("20 cancels at 20ms on a stopped Redis (timeout 2s): median %v, p99 %v after the cancel", lags[len(lags)/2], p99)
	if p99 > 500*time.Millisecond {
		t.Errorf("p99 %v from cancel to return", p99)
	}
	if st, c := s.State(), s.cb.Counts(); st != StateClosed || c.TotalFailures != 0 {
		t.Errorf("breaker %v with %d failures after canceled calls only (WithTripAfter(1))", st, c.TotalFailures)
	}
	thawed = true
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
}

// What 4 replicas admit locally for a key first used during a 3s outage is
// written back when Redis returns: the total stays at the limit, where
// without the write-back Redis would admit the limit again. The limit is
// per hour: a sliding window of a minute would, when the run crosses a
// minute's end, rightly admit up to the limit × the share of the new
// minute gone (about 170 more 10s in), which is the approximation's, not
// the write-back's.
func TestOutageWriteBack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 4 replica processes through a 3 s outage; make test runs it")
	}
	srv := testredis.Start(t)
	const limit = 1000
	start := time.Now().Add(3 * time.Second)
	outage, back := start.Add(700*time.Millisecond), start.Add(3700*time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(time.Until(outage))
		if err := srv.Freeze(); err != nil {
			t.Error(err)
		}
		time.Sleep(time.Until(back))
		if err := srv.Thaw(); err != nil {
			t.Error(err)
		}
	})
	// The grace outlasts the run: how far apart the replicas' breakers
	// close depends on the machine (a probe can fail behind the backlog a
	// stopped Redis works off), and the test is about the write-back, not
	// about the default grace (5s), which docs/failure.md measures.
	reps := runReplicas(t, 4, replicaJob{
		Addr: srv.Addr, Policy: LocalFallback, Replicas: 4, Callers: 16, Limit: ratewarden.PerHour(limit).String(),
		Start: start, Duration: 9 * time.Second, HotKey: "hot", HotFrom: start.Add(time.Second), Grace: 30 * time.Second,
	})
	wg.Wait()
	tot := sum(reps)
	t.Logf("key first used during a 3s outage: %d admitted by 4 replicas in 8s (limit %d/h); %d units written back; causes %v",
		tot.Allowed, limit, tot.Reconciled, tot.Causes)
	if tot.Errors != 0 {
		t.Errorf("%d errors to callers, first: %s", tot.Errors, tot.FirstError)
	}
	if tot.Reconciled < limit/2 {
		t.Errorf("%d units written back, want the outage's local admissions", tot.Reconciled)
	}
	if tot.Allowed > limit+limit/20 {
		t.Errorf("%d admitted, want at most the limit %d and 5%%", tot.Allowed, limit)
	}
	if tot.Allowed < limit/2 {
		t.Errorf("only %d admitted: the replicas' local shares were not used", tot.Allowed)
	}
}

// One stall of Redis (DEBUG SLEEP) times out every call in flight at once:
// one failed round trip per timeout, not one failure per call. Stalls of
// about 2 timeouts leave the breaker closed; one of 15 is evidence, and
// opens it.
func TestOneStallIsOneRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: stalls of Redis under load; make test runs it")
	}
	srv := testredis.Start(t, "--enable-debug-command", "local")
	var opened atomic.Int64
	// A 200ms timeout: stalls of about 2 timeouts leave 3 to spare before
	// a busy machine's own delays could make 5.
	s := newStore(t, openRedisStore(t, srv.Addr), WithPolicy(FailClosed), WithLogger(testLogger(t)), WithTimeout(200*time.Millisecond),
		WithOnStateChange(func(_, to State) {
			if to == StateOpen {
				opened.Add(1)
			}
		}))
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Minute}
	tr := startTraffic(s, 32, lim, func(ratewarden.Result) bool { return true })
	tr.waitCalls(t, 1000, waitCap)
	for range 3 {
		if _, err := srv.Do("DEBUG", "SLEEP", "0.45"); err != nil { // about 2 timeouts
			t.Fatal(err)
		}
		tr.waitCalls(t, 1000, waitCap)
	}
	short := opened.Load()
	degradedShort := tr.bySource[ratewarden.SourceFailClosed].Load()
	if _, err := srv.Do("DEBUG", "SLEEP", "3"); err != nil { // 15 timeouts
		t.Fatal(err)
	}
	tr.finish(t, 200*time.Millisecond)
	t.Logf("3 stalls of 450ms (timeout 200ms) under 32 callers: breaker opened %d times, %d answers degraded; a 3s stall: opened %d times",
		short, degradedShort, opened.Load()-short)
	if short != 0 {
		t.Errorf("the breaker opened %d times on stalls of 450ms (2-3 timeouts each)", short)
	}
	if opened.Load() == short {
		t.Error("the breaker stayed closed through a 3s stall (15 timeouts)")
	}
}
