package fallback

// Acceptance tests against a real redis-server behind testredis.Proxy,
// through the production redisstore on a rueidis client.

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
)

const (
	// latencyMargin is what a check may take beyond the timeout by
	// docs/failure.md (max latency <= 150 ms: the 50 ms timeout + 100 ms).
	// A busy machine adds what no deadline can shorten, the time it left
	// this process without a CPU: the latency bounds below add the worst
	// lateness of a 10 ms ticker measured while the traffic ran (lateness),
	// and say both. Without the deadline a black-holed call waits for
	// rueidis' 10 s write timeout, and a call to the slow Redis below for
	// its slowDelay, far beyond.
	latencyMargin = 100 * time.Millisecond
	workers       = 64
	// slowDelay is how late the slow Redis answers: far past the timeout
	// (50 ms) plus any lateness of its timer on a busy machine, so a call
	// to it always times out, and past the latency bound, so a call that
	// waited for the answer fails the bound.
	slowDelay = 5 * time.Second
	// waitCap caps the waits for a state the test brings about (the
	// breaker opening, traffic reaching Redis): far above what they take.
	waitCap = 30 * time.Second
	// healthyTimeout replaces the 50 ms default where a test needs every
	// call to a healthy Redis to succeed: on a busy machine a healthy call
	// can take longer than 50 ms, and would then be degraded.
	healthyTimeout = 10 * time.Second
)

// countingStore counts the calls that reach the primary (while the breaker
// is open there must be none) and those still in flight.
type countingStore struct {
	ratewarden.Store
	calls     atomic.Int64
	inFlight  atomic.Int64
	lastStart atomic.Int64 // time.Now().UnixNano() of the latest call
}

func (c *countingStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	c.calls.Add(1)
	c.lastStart.Store(time.Now().UnixNano())
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	return c.Store.Check(ctx, req, res)
}

// replica is one application replica: its own client, redisstore and
// fallback Store.
type replica struct {
	primary *countingStore
	fb      *Store
}

func newReplica(t *testing.T, addr string, opts ...Option) *replica {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	t.Cleanup(c.Close)
	rs, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingStore{Store: rs}
	return &replica{primary: p, fb: newStore(t, p, append([]Option{WithLogger(testLogger(t))}, opts...)...)}
}

// traffic is workers goroutines checking keys on a store until stopped,
// recording the worst latency and everything that came back.
type traffic struct {
	stop       chan struct{}
	wg         sync.WaitGroup
	maxLatency atomic.Int64
	calls      atomic.Int64
	errs       atomic.Int64
	firstErr   atomic.Pointer[error]
	bySource   [ratewarden.SourceLocalFallback + 1]atomic.Int64
	allowedBy  [ratewarden.SourceLocalFallback + 1]atomic.Int64
	badResult  atomic.Pointer[ratewarden.Result]
	late       *lateness
}

// lateness measures, until stopped, how late a 10 ms ticker fires at
// worst: how long the machine left this process (or the ticker's
// goroutine) waiting for a CPU.
type lateness struct {
	worst atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func watchLateness() *lateness {
	l := &lateness{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-l.stop:
				return
			case now := <-tick.C:
				if d := int64(now.Sub(last) - 10*time.Millisecond); d > l.worst.Load() {
					l.worst.Store(d)
				}
				last = now
			}
		}
	}()
	return l
}

// end stops the watch and returns the worst lateness seen.
func (l *lateness) end() time.Duration {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return time.Duration(l.worst.Load())
}

// unseenDelay is what a busy machine can delay one goroutine that the one
// ticker watching the lateness does not see (a run under -race with the
// rest of the suite measured one call 8.7 ms past timeout + margin +
// lateness): the bound stays far below what a call without its deadline
// takes.
const unseenDelay = 100 * time.Millisecond

// latencyBound is the longest a check may take: timeout + latencyMargin +
// late, the worst lateness measured meanwhile, + unseenDelay.
func latencyBound(timeout, late time.Duration) time.Duration {
	return timeout + latencyMargin + late + unseenDelay
}

// startTraffic runs n workers; valid reports whether a result is one the
// store may give (it is asked about every result).
func startTraffic(st ratewarden.Store, n int, lim ratewarden.Limit, valid func(ratewarden.Result) bool) *traffic {
	tr := &traffic{stop: make(chan struct{}), late: watchLateness()}
	for w := range n {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			key := "user:" + strconv.Itoa(w%16)
			res := make([]ratewarden.Result, 1)
			req := &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: 1}
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				start := time.Now()
				err := st.Check(context.Background(), req, res)
				lat := time.Since(start)
				for {
					old := tr.maxLatency.Load()
					if int64(lat) <= old || tr.maxLatency.CompareAndSwap(old, int64(lat)) {
						break
					}
				}
				tr.calls.Add(1)
				if err != nil {
					tr.errs.Add(1)
					tr.firstErr.CompareAndSwap(nil, &err)
				} else {
					r := res[0]
					tr.bySource[r.Source].Add(1)
					if r.Allowed {
						tr.allowedBy[r.Source].Add(1)
					}
					if !valid(r) {
						tr.badResult.CompareAndSwap(nil, &r)
					}
				}
				time.Sleep(5 * time.Millisecond) // real traffic pauses; keeps the box schedulable
			}
		}()
	}
	return tr
}

// finish stops the workers and fails the test on any error, invalid
// result, or call slower than latencyBound(timeout, the lateness measured
// while they ran).
func (tr *traffic) finish(t *testing.T, timeout time.Duration) {
	t.Helper()
	close(tr.stop)
	tr.wg.Wait()
	late := tr.late.end()
	max, bound := time.Duration(tr.maxLatency.Load()), latencyBound(timeout, late)
	t.Logf("%d calls: %d errors, max latency %v (bound %v: timeout %v + %v + the process's worst lateness %v + %v unseen); by source: store %d, fail_open %d, fail_closed %d, local_fallback %d",
		tr.calls.Load(), tr.errs.Load(), max, bound, timeout, latencyMargin, late, unseenDelay, tr.bySource[ratewarden.SourceStore].Load(), tr.bySource[ratewarden.SourceFailOpen].Load(),
		tr.bySource[ratewarden.SourceFailClosed].Load(), tr.bySource[ratewarden.SourceLocalFallback].Load())
	if n := tr.errs.Load(); n > 0 {
		t.Errorf("%d errors reached callers; first: %v", n, *tr.firstErr.Load())
	}
	if r := tr.badResult.Load(); r != nil {
		t.Errorf("invalid result: %+v", *r)
	}
	if max > bound {
		t.Errorf("max latency %v, want <= %v: the timeout %v + %v (docs/failure.md) + the worst the machine left this process waiting meanwhile, %v (a 10 ms ticker's lateness), + %v it may not see: the deadline was not applied",
			max, bound, timeout, latencyMargin, late, unseenDelay)
	}
}

// waitCalls waits until the traffic has made n more calls than it had at
// the start, for at most d.
func (tr *traffic) waitCalls(t *testing.T, n int64, d time.Duration) {
	t.Helper()
	from := tr.calls.Load()
	testredis.WaitFor(t, d, func() string {
		if got := tr.calls.Load() - from; got < n {
			return fmt.Sprintf("traffic made %d of %d calls", got, n)
		}
		return ""
	})
}

// policyResult returns the validity check for results under p.
func policyResult(p Policy) func(ratewarden.Result) bool {
	return func(r ratewarden.Result) bool {
		switch r.Source {
		case ratewarden.SourceStore:
			return true
		case ratewarden.SourceFailOpen:
			return p == FailOpen && r.Allowed && r.Degraded()
		case ratewarden.SourceFailClosed:
			return p == FailClosed && !r.Allowed && r.RetryAfter > 0 && r.Degraded()
		case ratewarden.SourceLocalFallback:
			return p == LocalFallback && r.Degraded() && (r.Allowed || r.RetryAfter > 0)
		}
		return false
	}
}

// waitState polls until s is in want, for at most d; it returns how long
// that took.
func waitState(t *testing.T, s *Store, want State, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for s.State() != want {
		if time.Since(start) > d {
			t.Fatalf("breaker still %v after %v, want %v", s.State(), d, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// waitStore polls with checks until one is decided by the store, for at
// most d; it returns how long that took.
func waitStore(t *testing.T, s *Store, lim ratewarden.Limit, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r, err := check(t, s, "recovery-probe", lim, 0)
		if err != nil {
			t.Fatalf("check during recovery: %v", err)
		}
		if r.Source == ratewarden.SourceStore {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("no decision from Redis %v after it came back (state %v)", d, s.State())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var (
	trafficLimit = ratewarden.Limit{Rate: 1_000_000, Period: time.Minute} // sliding window, never binding
	fixedLimit   = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Hour}
)

// recoveryMargin is what recovery may take beyond the package doc's
// promise, 2 × the probe interval + the timeout (docs/failure.md: "+ 10 s"):
// on a busy machine a probe can miss its 50 ms deadline while the client
// reconnects and the restarted Redis loads the function library, and the
// next probe is a probe interval later.
const recoveryMargin = 10 * time.Second

// recoveryBound is the promise of the package doc plus recoveryMargin.
func recoveryBound(probeInterval time.Duration) time.Duration {
	return 2*probeInterval + DefaultTimeout + recoveryMargin
}

// killedProbeInterval is TestRedisKilled's probe interval: the test checks
// that nothing reaches Redis for a while after the breaker opened, and must
// be done before the first probe however late it sees the breaker open.
const killedProbeInterval = 3 * time.Second

// quietBeforeCount is how long no call may have reached the primary before
// TestRedisKilled counts the calls of the open breaker: longer than a busy
// machine holds a goroutine between the breaker letting its call through
// and the call.
const quietBeforeCount = 300 * time.Millisecond

// Acceptance 1, 3, 4 and 6: Redis killed under 64 goroutines, then
// restarted empty (no data, no scripts).
func TestRedisKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: replica processes through a killed Redis; make test runs it")
	}
	for _, p := range []Policy{FailOpen, LocalFallback, FailClosed} {
		t.Run(p.String(), func(t *testing.T) {
			srv := testredis.Start(t)
			proxy := testredis.NewProxy(t, srv.Addr)
			rp := newReplica(t, proxy.Addr, WithPolicy(p), WithProbeInterval(killedProbeInterval))
			for i := range 3 { // state in Redis before the crash
				mustCheck(t, rp.primary, "fixed", fixedLimit, 1)
				_ = i
			}

			tr := startTraffic(rp.fb, workers, trafficLimit, policyResult(p))
			testredis.WaitFor(t, waitCap, func() string {
				if tr.bySource[ratewarden.SourceStore].Load() == 0 {
					return fmt.Sprintf("no decision from Redis before the kill (%d calls)", tr.calls.Load())
				}
				return ""
			})
			killed := time.Now() // the breaker opens after this, so probes come after killed + the probe interval
			srv.Kill()
			opened := waitState(t, rp.fb, StateOpen, waitCap)
			t.Logf("breaker open %v after the kill began (%v after Redis stopped answering)", time.Since(killed), opened)

			// Open: nothing reaches the primary or the network. (Calls in
			// flight at the kill may still be on their way out; rueidis
			// finishes them within its own timeouts. A call the breaker let
			// through before it opened can reach the primary after it, when
			// a busy machine held its goroutine in between: the count
			// starts once no call has started for a while, which never
			// comes while the traffic is let through.)
			testredis.WaitFor(t, waitCap, func() string {
				if n := rp.primary.inFlight.Load(); n > 0 {
					return fmt.Sprintf("%d calls to the primary still in flight after the breaker opened", n)
				}
				if ago := time.Since(time.Unix(0, rp.primary.lastStart.Load())); ago < quietBeforeCount {
					return fmt.Sprintf("a call reached the primary %v after the breaker opened, %v ago", time.Since(killed), ago)
				}
				return ""
			})
			calls, net := rp.primary.calls.Load(), proxy.Stats()
			// The traffic goes on without Redis: every worker gets answers.
			tr.waitCalls(t, 4*workers, waitCap)
			if time.Since(killed) >= killedProbeInterval {
				t.Fatalf("the machine is too slow for this test: the open state was checked until %v after the kill, past the first probe at %v",
					time.Since(killed), killedProbeInterval)
			}
			if got := rp.primary.calls.Load() - calls; got != 0 {
				t.Errorf("%d calls reached the primary while the breaker was open", got)
			}
			if got := proxy.Stats(); got != net {
				t.Errorf("network touched while open: proxy stats %+v, then %+v", net, got)
			}
			if r := mustCheck(t, rp.fb, "probe", trafficLimit, 1); !r.Degraded() {
				t.Fatalf("result while open: %+v, want degraded", r)
			}

			// Redis comes back empty, the application keeps running.
			srv.Restart(t)
			took := waitStore(t, rp.fb, trafficLimit, recoveryBound(killedProbeInterval))
			t.Logf("decisions from Redis again %v after it came back (bound %v)", took, recoveryBound(killedProbeInterval))
			if st := rp.fb.State(); st != StateClosed {
				t.Fatalf("state after recovery = %v, want closed", st)
			}
			tr.waitCalls(t, 4*workers, waitCap) // traffic on the restarted Redis
			tr.finish(t, DefaultTimeout)

			// The limit restarts cleanly: Redis lost the 3 units. (Asked
			// of the primary itself, without the 50 ms deadline that a
			// healthy call may overrun on a busy machine.)
			for i := range 6 {
				r := mustCheck(t, rp.primary, "fixed", fixedLimit, 1)
				if r.Source != ratewarden.SourceStore || r.Allowed != (i < 5) {
					t.Fatalf("check %d after the restart: %+v, want the full limit of 5 from Redis", i, r)
				}
			}
			writeBackDone(t, rp.fb)
		})
	}
}

// Acceptance 4, in place: Redis loses its scripts and data under traffic
// (SCRIPT FLUSH, FLUSHALL) without a restart. No error, no degraded answer.
func TestRedisScriptCacheFlushed(t *testing.T) {
	srv := testredis.Start(t)
	// No call may be degraded here, so no healthy call may time out.
	rp := newReplica(t, srv.Addr, WithPolicy(FailClosed), WithTimeout(healthyTimeout))
	for range 5 {
		mustCheck(t, rp.fb, "fixed", fixedLimit, 1)
	}
	tr := startTraffic(rp.fb, 16, trafficLimit, func(r ratewarden.Result) bool { return r.Source == ratewarden.SourceStore })
	tr.waitCalls(t, 64, waitCap)
	for _, cmd := range [][]string{{"SCRIPT", "FLUSH"}, {"FLUSHALL"}} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
		tr.waitCalls(t, 64, waitCap) // traffic on the flushed Redis
	}
	tr.finish(t, healthyTimeout)
	if r := mustCheck(t, rp.fb, "fixed", fixedLimit, 1); !r.Allowed || r.Source != ratewarden.SourceStore || r.Remaining != 4 {
		t.Fatalf("after FLUSHALL: %+v, want a fresh limit from Redis", r)
	}
}

// Acceptance 2 and 3: Redis black-holed (connections open, no answers).
// Calls stay bounded by the timeout, goroutines do not pile up, and the
// breaker closes again when the network heals.
func TestRedisBlackholed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a black-holed Redis under load; make test runs it")
	}
	srv := testredis.Start(t)
	proxy := testredis.NewProxy(t, srv.Addr)
	rp := newReplica(t, proxy.Addr, WithPolicy(LocalFallback))
	baseline := runtime.NumGoroutine()

	tr := startTraffic(rp.fb, workers, trafficLimit, policyResult(LocalFallback))
	tr.waitCalls(t, workers, waitCap)
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	var maxG atomic.Int64
	sampleStop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if g := int64(runtime.NumGoroutine()); g > maxG.Load() {
				maxG.Store(g)
			}
			select {
			case <-sampleStop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	waitState(t, rp.fb, StateOpen, waitCap)
	testredis.WaitFor(t, waitCap, func() string { // the calls in flight time out
		if n := rp.primary.inFlight.Load(); n > 0 {
			return fmt.Sprintf("%d calls to the black hole still in flight after the breaker opened", n)
		}
		return ""
	})
	atOpen := int64(runtime.NumGoroutine())
	// Three probe intervals: three half-open probes time out.
	time.Sleep(3 * DefaultProbeInterval)
	close(sampleStop)
	<-sampled
	// The workers; one parked rueidis goroutine per call that was in flight
	// when the network went dark (rueidis waits for the reply until its
	// ConnWriteTimeout closes the connection) and per timed-out probe; the
	// sampler, proxy connections and rueidis' own background: 40. Without
	// the breaker every timed-out call would park one more.
	if limit := int64(baseline + 2*workers + 40); maxG.Load() > limit {
		t.Errorf("%d goroutines during the black hole, want <= %d (baseline %d + 2 × %d workers + 40)", maxG.Load(), limit, baseline, workers)
	}
	if now := int64(runtime.NumGoroutine()); now > atOpen+10 { // 3 probes parked

		t.Errorf("goroutines grew while the breaker held the black hole off: %d when it opened, %d three probes later", atOpen, now)
	}
	t.Logf("goroutines: baseline %d, %d when the breaker opened, max %d during the black hole; proxy %+v", baseline, atOpen, maxG.Load(), proxy.Stats())

	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	took := waitStore(t, rp.fb, trafficLimit, recoveryBound(DefaultProbeInterval))
	t.Logf("decisions from Redis again %v after the network healed (bound %v)", took, recoveryBound(DefaultProbeInterval))
	tr.finish(t, DefaultTimeout)
}

// Acceptance 7 and 6: Redis answers, but slowDelay late. Calls return by the
// timeout with the policy's answer: FailClosed denies with a RetryAfter,
// FailOpen allows, both flagged as degraded.
func TestRedisSlow(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a slowed Redis under load; make test runs it")
	}
	for _, p := range []Policy{FailClosed, FailOpen, LocalFallback} {
		t.Run(p.String(), func(t *testing.T) {
			srv := testredis.Start(t)
			proxy := testredis.NewProxy(t, srv.Addr)
			rp := newReplica(t, proxy.Addr, WithPolicy(p))
			mustCheck(t, rp.fb, "warm", trafficLimit, 1)
			if err := proxy.Delay(slowDelay); err != nil {
				t.Fatal(err)
			}
			tr := startTraffic(rp.fb, 8, trafficLimit, policyResult(p))
			var slowest time.Duration
			for i := range 10 {
				start := time.Now()
				r := mustCheck(t, rp.fb, "k", trafficLimit, 1)
				took := time.Since(start)
				if took > slowDelay {
					t.Fatalf("check %d on slow Redis took %v: it waited for Redis' answer (%v late), the deadline was not applied", i, took, slowDelay)
				}
				slowest = max(slowest, took)
				if !r.Degraded() || !policyResult(p)(r) {
					t.Fatalf("check %d on slow Redis: %+v, want a degraded %v answer", i, r, p)
				}
				switch p {
				case FailClosed:
					if r.Allowed || r.RetryAfter <= 0 {
						t.Fatalf("fail_closed: %+v, want denied with a RetryAfter", r)
					}
				case FailOpen:
					if !r.Allowed {
						t.Fatalf("fail_open: %+v, want allowed", r)
					}
				}
			}
			waitState(t, rp.fb, StateOpen, waitCap)
			tr.finish(t, DefaultTimeout) // checks the traffic's latency, and measures the lateness the 10 checks' bound needs
			if bound := latencyBound(DefaultTimeout, time.Duration(tr.late.worst.Load())); slowest > bound {
				t.Errorf("the slowest of 10 checks on slow Redis took %v, want <= %v (the timeout %v + %v + the worst lateness of the process, %v; Redis answers after %v)",
					slowest, bound, DefaultTimeout, latencyMargin, time.Duration(tr.late.worst.Load()), slowDelay)
			}
		})
	}
}

// Acceptance 5: 4 replicas (4 clients, 4 fallback Stores) of a limit of 100
// admit at most 100 together during an outage, for every algorithm.
func TestReplicaSharesDuringOutage(t *testing.T) {
	srv := testredis.Start(t)
	proxy := testredis.NewProxy(t, srv.Addr)
	const n = 4
	reps := make([]*replica, n)
	for i := range reps {
		reps[i] = newReplica(t, proxy.Addr, WithPolicy(LocalFallback), WithReplicas(n))
	}
	if err := proxy.Refuse(); err != nil { // Redis unreachable for everyone
		t.Fatal(err)
	}
	for _, lim := range []ratewarden.Limit{
		{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Hour, Burst: 200},
		{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Hour},
		{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour},
	} {
		// A FixedWindow run that straddles the hour gets a second window;
		// run again then (it cannot happen twice in a row).
		for attempt := 0; ; attempt++ {
			window := time.Now().Truncate(lim.Period)
			admitted := hammer(t, reps, lim.String()+strconv.Itoa(attempt), lim)
			if lim.Algorithm == ratewarden.FixedWindow && !time.Now().Truncate(lim.Period).Equal(window) && attempt == 0 {
				continue
			}
			want := lim.Capacity()
			t.Logf("%v: %d replicas admitted %d during the outage", lim, n, admitted)
			if admitted != want {
				t.Errorf("%v: %d replicas admitted %d together, want exactly %d (%d each)", lim, n, admitted, want, want/n)
			}
			break
		}
	}
}

// hammer sends 16 goroutines × 20 checks of key to each replica and returns
// how many were admitted in total. Every answer must be a local one.
func hammer(t *testing.T, reps []*replica, key string, lim ratewarden.Limit) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, rp := range reps {
		for range 16 {
			wg.Go(func() {
				res := make([]ratewarden.Result, 1)
				req := &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: 1}
				for range 20 {
					if err := rp.fb.Check(context.Background(), req, res); err != nil {
						t.Errorf("check: %v", err)
						return
					}
					if res[0].Source != ratewarden.SourceLocalFallback {
						t.Errorf("result from %v during the outage", res[0].Source)
						return
					}
					if res[0].Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return admitted.Load()
}

// writeBackDone waits until s has written the outage's admissions back:
// its grace is over and its writer idle, so that nothing of it outlives
// the test (and logs to a test that has ended).
func writeBackDone(t *testing.T, s *Store) {
	t.Helper()
	testredis.WaitFor(t, waitCap, func() string {
		s.writer.mu.Lock() // endGrace ends a grace and starts its write-back under it
		busy, until := s.writer.busy, s.pins.until.Load()
		s.writer.mu.Unlock()
		if busy || until != 0 {
			return fmt.Sprintf("the write-back is still under way (writing %v, grace until %d)", busy, until)
		}
		return ""
	})
}
