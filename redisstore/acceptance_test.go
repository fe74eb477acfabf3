package redisstore

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
)

const (
	replicas   = 4
	goroutines = 32
	attempts   = 5 // per goroutine: 640 attempts for a limit of 100
)

// hammer makes every goroutine of every limiter try Allow attempts times
// on key, and returns how many were admitted.
func hammer(t *testing.T, lims []*ratewarden.Limiter, key string, lim ratewarden.Limit) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(lims)*goroutines)
	for _, l := range lims {
		for range goroutines {
			wg.Go(func() {
				for range attempts {
					r, err := l.Allow(bg, key, lim)
					if err != nil {
						errs <- err
						return
					}
					if r.Allowed {
						admitted.Add(1)
					} else if r.RetryAfter <= 0 || r.Remaining != 0 {
						errs <- fmt.Errorf("denied with RetryAfter %v, Remaining %d", r.RetryAfter, r.Remaining)
						return
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
	return admitted.Load()
}

func limiter(tb testing.TB, s ratewarden.Store) *ratewarden.Limiter {
	tb.Helper()
	l, err := ratewarden.New(s)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// TestAcceptance_ExactAcrossReplicas: 4 limiters, each with its own client,
// × 32 goroutines on one key admit exactly the limit.
func TestAcceptance_ExactAcrossReplicas(t *testing.T) {
	srv := testredis.Start(t)
	var lims, goLims []*ratewarden.Limiter
	for range replicas {
		lims = append(lims, limiter(t, openStore(t, srv.Addr)))
		goLims = append(goLims, limiter(t, openGoRedisStore(t, srv.Addr)))
	}
	for _, tc := range []struct {
		name string
		lims []*ratewarden.Limiter
		lim  ratewarden.Limit
	}{
		{"fixed_window", lims, ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Minute}},
		// On a fresh key within one window the weighted estimate is exact
		// (no previous window to weigh).
		{"sliding_window", lims, ratewarden.PerMinute(100)},
		// A bucket of 100 refilling one token per 864 s: no refill during
		// the test.
		{"token_bucket", lims, ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: 24 * time.Hour, Burst: 100}},
		// Per hour: no entry leaves the log during the run.
		{"sliding_log", lims, ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Hour}},
		{"fixed_window_go_redis", goLims, ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Minute}},
		{"sliding_log_go_redis", goLims, ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			P := tc.lim.Period.Microseconds()
			windowed := tc.lim.Algorithm == ratewarden.FixedWindow || tc.lim.Algorithm == ratewarden.SlidingWindow
			// Windows are epoch-aligned on Redis' clock: a run that
			// straddles a boundary proves nothing, so it is repeated on a
			// fresh key (a run takes far less than a window).
			for try := range 3 {
				key := fmt.Sprintf("exact:%s:%d", tc.name, try)
				t0 := redisTime(t, srv)
				got := hammer(t, tc.lims, key, tc.lim)
				t1 := redisTime(t, srv)
				if windowed && t0/P != t1/P {
					t.Logf("run %d straddled a window boundary; again on a fresh key", try)
					continue
				}
				// Nothing comes back within a run: no log entry leaves, no
				// token refills (unless the run took that long).
				back := tc.lim.Period
				if tc.lim.Algorithm == ratewarden.TokenBucket {
					back = tc.lim.Period / time.Duration(tc.lim.Rate)
				}
				if took := time.Duration(t1-t0) * time.Microsecond; !windowed && took >= back {
					t.Fatalf("run took %v, longer than the %v in which a unit comes back: too slow to be conclusive", took, back)
				}
				if got != tc.lim.Rate {
					t.Fatalf("admitted %d of %d attempts, want exactly %d", got, replicas*goroutines*attempts, tc.lim.Rate)
				}
				return
			}
			t.Fatal("every run straddled a window boundary")
		})
	}
}

// TestAcceptance_OneClockRedisTime: the store keeps no clock of its own;
// decisions, RetryAfter and ResetAfter come from Redis TIME. Two replicas
// whose local clocks disagree by 10 s (+5 s and −5 s) see one window end.
func TestAcceptance_OneClockRedisTime(t *testing.T) {
	srv := testredis.Start(t)
	a, b := openStore(t, srv.Addr), openStore(t, srv.Addr)
	skewA, skewB := 5*time.Second, -5*time.Second
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Minute}
	P := lim.Period.Microseconds()
	req := &ratewarden.Request{Key: "clock", Limits: []ratewarden.Limit{lim}, Cost: 1}
	res := make([]ratewarden.Result, 1)
	for try := range 3 {
		req.Key = "clock" + strconv.Itoa(try)
		var ends []int64
		admitted := 0
		t0 := redisTime(t, srv)
		for i := range 6 {
			s, skew := a, skewA
			if i%2 == 1 {
				s, skew = b, skewB
			}
			sent := time.Now()
			local := sent.Add(skew) // what this replica believes; never consulted
			tr0 := redisTime(t, srv)
			now, err := s.check(bg, req, res)
			tr1 := redisTime(t, srv)
			took := time.Since(sent)
			if err != nil {
				t.Fatal(err)
			}
			if now < tr0 || now > tr1 {
				t.Fatalf("script decided at %d, outside Redis TIME [%d, %d]", now, tr0, tr1)
			}
			end := now - now%P + P
			if got := res[0].ResetAfter.Microseconds(); got != end-now {
				t.Fatalf("ResetAfter %dµs, want window end − Redis now = %dµs", got, end-now)
			}
			if !res[0].Allowed && res[0].RetryAfter.Microseconds() != end-now {
				t.Fatalf("RetryAfter %v, want %dµs", res[0].RetryAfter, end-now)
			}
			// The local clock is off by skew; the reported instant is not:
			// read locally it is off by the skew, less the time from the
			// local reading to the script's (both clocks are this
			// machine's; a millisecond for rounding).
			if d := local.Add(res[0].ResetAfter).Sub(time.UnixMicro(end)); d < skew-took-time.Millisecond || d > skew+time.Millisecond {
				t.Fatalf("local reading is off by %v, expected the skew %v less at most the %v the call took", d, skew, took)
			}
			ends = append(ends, now+res[0].ResetAfter.Microseconds())
			if res[0].Allowed {
				admitted++
			}
		}
		if redisTime(t, srv)/P != t0/P {
			t.Logf("run %d straddled a window boundary; again", try)
			continue
		}
		for _, e := range ends {
			if e != ends[0] {
				t.Fatalf("replicas see different window ends: %v", ends)
			}
		}
		if admitted != 3 {
			t.Fatalf("admitted %d, want 3", admitted)
		}
		return
	}
	t.Fatal("every run straddled a window boundary")
}

// TestAcceptance_TTLAudit exercises every algorithm through every path and
// then checks that every key in Redis expires within its algorithm's bound.
func TestAcceptance_TTLAudit(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: 2 * time.Second},
		{Algorithm: ratewarden.SlidingWindow, Rate: 3, Period: 3 * time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: 1001 * time.Millisecond, Burst: 3},
		{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: 4 * time.Second},
		{Algorithm: ratewarden.FixedWindow, Rate: 50, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: 24 * time.Hour},
	}
	owner := map[string]ratewarden.Limit{}
	start := redisTime(t, srv)
	for i, lim := range limits {
		key := "audit:" + strconv.Itoa(i)
		owner[s.Key(key, lim)] = lim
		must := func(_ any, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(l.Peek(bg, key, lim))      // peek on nothing
		must(l.AllowN(bg, key, lim, 0)) // cost 0 on nothing
		for range lim.Capacity() + 1 {  // allow, then deny
			must(l.Allow(bg, key, lim))
		}
		must(l.Peek(bg, key, lim))
		must(l.AllowN(bg, key, lim, 0))
		// Multi-limit, admitted and then rejected by the small limit.
		other := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: 90 * time.Second}
		if other.Scope() == lim.Scope() {
			t.Fatal("test limits collide")
		}
		multi := "audit-multi:" + strconv.Itoa(i)
		owner[s.Key(multi, lim)], owner[s.Key(multi, other)] = lim, other
		for range lim.Capacity() + 1 {
			must(l.AllowAll(bg, multi, 1, lim, other))
		}
		// Reset, then write again.
		if err := l.Reset(bg, key, lim); err != nil {
			t.Fatal(err)
		}
		must(l.Allow(bg, key, lim))
		resetOnly := "audit-reset:" + strconv.Itoa(i)
		must(l.Allow(bg, resetOnly, lim))
		if err := l.Reset(bg, resetOnly, lim); err != nil {
			t.Fatal(err)
		}
	}
	keys := scanAll(t, srv)
	present := map[string]bool{}
	for _, k := range keys {
		lim, ok := owner[k]
		if !ok {
			t.Fatalf("unexpected key %q", k)
		}
		present[k] = true
		pttl, err := strconv.ParseInt(do(t, srv, "PTTL", k), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if pttl == -2 {
			continue // expired since the SCAN: as it must, some time
		}
		// PTTL 0: the key is in its last millisecond (Redis rounds down),
		// which a busy machine's audit can land on; -1 (no TTL) is the defect.
		if bound := ttlBound(lim); pttl < 0 || pttl > bound {
			t.Errorf("%s: PTTL %d ms, want in [0, %d] (a TTL is set and within the bound)", k, pttl, bound)
		}
	}
	// Every path wrote its keys: a key may be missing only if it could
	// have expired already, however slowly the audit ran.
	end := redisTime(t, srv)
	for k, lim := range owner {
		if !present[k] && !mayHaveExpired(lim, start, end) {
			t.Errorf("%s (%v): missing, but no key of it can expire within the %v the audit took", k, lim, time.Duration(end-start)*time.Microsecond)
		}
	}
}

// mayHaveExpired reports whether a key of l written between start and end
// (Redis TIME, µs) can have expired by end: a fixed window's when a window
// ended meanwhile; the others' when their shortest TTL (a period, or for a
// token bucket one unit's drain) has gone by.
func mayHaveExpired(l ratewarden.Limit, start, end int64) bool {
	P := l.Period.Microseconds()
	switch l.Algorithm {
	case ratewarden.FixedWindow:
		return start/P != end/P
	case ratewarden.TokenBucket:
		return end-start >= P/l.Rate
	default:
		return end-start >= P
	}
}

// ttlBound is the documented bound on a key's PTTL, in ms.
func ttlBound(l ratewarden.Limit) int64 {
	P := l.Period.Milliseconds()
	switch l.Algorithm {
	case ratewarden.FixedWindow:
		return P
	case ratewarden.SlidingWindow:
		return 2 * P
	case ratewarden.TokenBucket:
		drain := (l.Capacity()*l.Period.Microseconds() + l.Rate - 1) / l.Rate // µs, rounded up
		return (drain+999)/1000 + 1
	default:
		return P + 1
	}
}

func scanAll(t *testing.T, srv *testredis.Server) []string {
	t.Helper()
	var keys []string
	cursor := "0"
	for range 1000 {
		parts := strings.Split(do(t, srv, "SCAN", cursor, "COUNT", "1000"), "\n")
		cursor = parts[0]
		for _, k := range parts[1:] {
			if k != "" {
				keys = append(keys, k)
			}
		}
		if cursor == "0" {
			return keys
		}
	}
	t.Fatal("SCAN did not finish")
	return nil
}

// TestAcceptance_ScriptFlushAndRestart: SCRIPT FLUSH under concurrent
// traffic costs callers nothing (EVAL takes over on NOSCRIPT); after a
// restart errors last only while the server is down.
func TestAcceptance_ScriptFlushAndRestart(t *testing.T) {
	srv := testredis.Start(t)
	lims := []*ratewarden.Limiter{limiter(t, openStore(t, srv.Addr)), limiter(t, openStore(t, srv.Addr)), limiter(t, openGoRedisStore(t, srv.Addr))}
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Second}

	evalBefore := commandStats(t, srv)["eval"]
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		l := lims[i%len(lims)]
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				if _, err := l.Allow(bg, "flush:"+strconv.Itoa(j%7), lim); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for range 25 {
		waitCalls(t, &calls, 12) // traffic on the flushed scripts
		do(t, srv, "SCRIPT", "FLUSH")
	}
	waitCalls(t, &calls, 12)
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d calls failed across SCRIPT FLUSH; first: %v", n, calls.Load(), firstErr.Load())
	}
	if commandStats(t, srv)["eval"] == evalBefore {
		t.Fatal("no EVAL fallback happened: the flushes did not hit traffic")
	}
	t.Logf("%d calls, 25 flushes, no errors", calls.Load())

	// Restart under traffic: while the server is down, calls fail with
	// ErrStoreUnavailable; a call that starts after the restarted server
	// answers PING (empty: data and scripts gone) must succeed.
	var upAt atomic.Int64 // UnixNano when the restarted server answered
	var downErrs, lateErrs, lateOK atomic.Int64
	var lateErr atomic.Value
	stop = make(chan struct{})
	for i := range 12 {
		l := lims[i%len(lims)]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now().UnixNano()
				_, err := l.Allow(bg, "restart", lim)
				up := upAt.Load()
				switch {
				case err != nil && !errors.Is(err, ratewarden.ErrStoreUnavailable):
					lateErrs.Add(1)
					lateErr.CompareAndSwap(nil, err)
				case err != nil && up != 0 && start > up:
					lateErrs.Add(1)
					lateErr.CompareAndSwap(nil, err)
				case err != nil:
					downErrs.Add(1)
					time.Sleep(5 * time.Millisecond)
				case up != 0 && start > up:
					lateOK.Add(1)
				}
			}
		})
	}
	srv.Kill()
	testredis.WaitFor(t, waitCap, func() string { // traffic on the dead server
		if downErrs.Load() == 0 {
			return "no call saw the outage"
		}
		return ""
	})
	srv.Restart(t)
	upAt.Store(time.Now().UnixNano())
	testredis.WaitFor(t, waitCap, func() string { // traffic on the restarted server
		if n := lateOK.Load(); n < 24 {
			return fmt.Sprintf("%d calls succeeded after the restart (%d failed), want 24", n, lateErrs.Load())
		}
		return ""
	})
	close(stop)
	wg.Wait()
	if downErrs.Load() == 0 {
		t.Fatal("no call saw the outage")
	}
	if n := lateErrs.Load(); n != 0 {
		t.Fatalf("%d calls failed after the server was back; first: %v", n, lateErr.Load())
	}
	if lateOK.Load() == 0 {
		t.Fatal("no call succeeded after the restart")
	}
	t.Logf("restart: %d calls failed while down, %d succeeded after", downErrs.Load(), lateOK.Load())
}

// TestAcceptance_MultiLimitAllOrNothing: a per-second and a per-hour limit
// on one key, checked in one script call; a check rejected by either
// consumes nothing from the other.
func TestAcceptance_MultiLimitAllOrNothing(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	// 5 tokens, one more per second: a drained bucket stays short of 5
	// for 5 s, far longer than this test.
	perSecond := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Second, Burst: 5}
	perHour := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 20, Period: time.Hour}
	if _, err := l.AllowAll(bg, "warm-up", 1, perSecond, perHour); err != nil { // loads the script
		t.Fatal(err)
	}
	allowAll := func(key string, n int64) ratewarden.Decision {
		t.Helper()
		before := scriptCalls(t, srv)
		d, err := l.AllowAll(bg, key, n, perSecond, perHour)
		if err != nil {
			t.Fatal(err)
		}
		if calls := scriptCalls(t, srv) - before; calls != 1 {
			t.Fatalf("AllowAll made %d script calls, want 1", calls)
		}
		return d
	}
	dump := func(key string, lim ratewarden.Limit) string { return do(t, srv, "DUMP", s.Key(key, lim)) }

	// Rejected by the per-second limit: the per-hour log is untouched.
	if d := allowAll("a", 5); !d.Allowed || d.Results[1].Remaining != 15 {
		t.Fatalf("first: %+v", d)
	}
	hour := dump("a", perHour)
	d := allowAll("a", 5)
	if d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed || d.Results[1].Remaining != 15 {
		t.Fatalf("second: %+v; want denied by the per-second limit only, per-hour remaining 15", d)
	}
	if d.Binding().Limit != perSecond || d.Binding().RetryAfter <= 0 {
		t.Fatalf("binding: %+v", d.Binding())
	}
	if dump("a", perHour) != hour {
		t.Fatal("the rejected check changed the per-hour state")
	}
	if p, err := l.Peek(bg, "a", perHour); err != nil || p.Remaining != 15 {
		t.Fatalf("per-hour after rejection: %+v, %v; want 15 remaining", p, err)
	}

	// Rejected by the per-hour limit: the per-second bucket is untouched.
	tight := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: time.Hour}
	if d, err := l.AllowAll(bg, "b", 3, perSecond, tight); err != nil || !d.Allowed {
		t.Fatalf("b first: %+v, %v", d, err)
	}
	sec := dump("b", perSecond)
	before := scriptCalls(t, srv)
	d, err := l.AllowAll(bg, "b", 1, perSecond, tight)
	if err != nil || d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed || d.Results[1].RetryAfter <= 59*time.Minute {
		t.Fatalf("b second: %+v, %v; want denied by the per-hour limit only", d, err)
	}
	if calls := scriptCalls(t, srv) - before; calls != 1 {
		t.Fatalf("AllowAll made %d script calls, want 1", calls)
	}
	if dump("b", perSecond) != sec {
		t.Fatal("the rejected check changed the per-second state")
	}
}

// TestAcceptance_RejectedAndPeekConsumeNothing: denials, peeks and cost-0
// checks leave the stored state (value and expiry) byte for byte as it was;
// Reset clears only the key and limits it names.
func TestAcceptance_RejectedAndPeekConsumeNothing(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	for _, lim := range []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 4, Period: time.Hour},
		{Algorithm: ratewarden.SlidingWindow, Rate: 4, Period: time.Hour},
		{Algorithm: ratewarden.TokenBucket, Rate: 4, Period: time.Hour},
		{Algorithm: ratewarden.SlidingLog, Rate: 4, Period: time.Hour},
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			key := "still:" + lim.Algorithm.String()
			rk := s.Key(key, lim)
			snapshot := func() string {
				return do(t, srv, "DUMP", rk) + "|" + do(t, srv, "PEXPIRETIME", rk)
			}
			unchanged := func(what string, f func() (ratewarden.Result, error), allowed bool) {
				t.Helper()
				before := snapshot()
				r, err := f()
				if err != nil || r.Allowed != allowed {
					t.Fatalf("%s: %+v, %v; want Allowed %v", what, r, err, allowed)
				}
				if after := snapshot(); after != before {
					t.Fatalf("%s changed the state:\n%q\n%q", what, before, after)
				}
			}
			if _, err := l.AllowN(bg, key, lim, 2); err != nil {
				t.Fatal(err)
			}
			unchanged("peek", func() (ratewarden.Result, error) { return l.Peek(bg, key, lim) }, true)
			unchanged("cost 0", func() (ratewarden.Result, error) { return l.AllowN(bg, key, lim, 0) }, true)
			unchanged("denied cost 3", func() (ratewarden.Result, error) { return l.AllowN(bg, key, lim, 3) }, false)
			if r, err := l.AllowN(bg, key, lim, 2); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("the last 2: %+v, %v", r, err)
			}
			unchanged("denied", func() (ratewarden.Result, error) { return l.Allow(bg, key, lim) }, false)
			unchanged("peek when full", func() (ratewarden.Result, error) { return l.Peek(bg, key, lim) }, false)
		})
	}

	// Reset clears only that key under that limit.
	a := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Hour}
	b := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 2, Period: time.Hour}
	for _, k := range []string{"r1", "r2"} {
		if d, err := l.AllowAll(bg, k, 2, a, b); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if err := l.Reset(bg, "r1", a); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key    string
		lim    ratewarden.Limit
		exists string
	}{{"r1", a, "0"}, {"r1", b, "1"}, {"r2", a, "1"}, {"r2", b, "1"}} {
		if got := do(t, srv, "EXISTS", s.Key(c.key, c.lim)); got != c.exists {
			t.Errorf("after Reset(r1, %v): EXISTS %s = %s, want %s", a, s.Key(c.key, c.lim), got, c.exists)
		}
	}
	if r, err := l.Allow(bg, "r1", a); err != nil || !r.Allowed || r.Remaining != 1 {
		t.Errorf("r1 after reset: %+v, %v; want a full allowance", r, err)
	}
	if r, err := l.Allow(bg, "r2", a); err != nil || r.Allowed {
		t.Errorf("r2 must still be exhausted: %+v, %v", r, err)
	}
}

// TestAcceptance_BadInputMakesNoRedisCall: bad input through the Limiter
// gets an error naming the field and never reaches Redis.
func TestAcceptance_BadInputMakesNoRedisCall(t *testing.T) {
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{"rueidis": openStore(t, srv.Addr), "go-redis": openGoRedisStore(t, srv.Addr)} {
		l := limiter(t, s)
		ok := ratewarden.PerMinute(10)
		before := commandStats(t, srv)
		for _, tc := range []struct {
			name  string
			call  func() error
			want  error
			field string
		}{
			{"rate 0", func() error { _, err := l.Allow(bg, "k", ratewarden.PerSecond(0)); return err }, ratewarden.ErrInvalidLimit, "rate"},
			{"negative rate", func() error { _, err := l.Allow(bg, "k", ratewarden.PerSecond(-3)); return err }, ratewarden.ErrInvalidLimit, "rate"},
			{"sub-ms period", func() error {
				_, err := l.Allow(bg, "k", ratewarden.Limit{Rate: 1, Period: 1500 * time.Microsecond})
				return err
			}, ratewarden.ErrInvalidLimit, "period"},
			{"negative burst", func() error {
				_, err := l.Allow(bg, "k", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Second, Burst: -1})
				return err
			}, ratewarden.ErrInvalidLimit, "burst"},
			{"negative cost", func() error { _, err := l.AllowN(bg, "k", ok, -1); return err }, ratewarden.ErrInvalidCost, "cost"},
			{"cost over capacity", func() error { _, err := l.AllowN(bg, "k", ok, 11); return err }, ratewarden.ErrInvalidCost, "cost"},
			{"refill beyond MaxPeriod", func() error {
				// Each field is in range, but a full bucket takes 10^12 ×
				// 366 days to refill: no key could expire.
				_, err := l.Allow(bg, "k", ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: ratewarden.MaxPeriod, Burst: ratewarden.MaxRate})
				return err
			}, ratewarden.ErrInvalidLimit, "refill"},
			{"unknown algorithm", func() error {
				_, err := l.Allow(bg, "k", ratewarden.Limit{Algorithm: 9, Rate: 1, Period: time.Second})
				return err
			}, ratewarden.ErrInvalidLimit, "algorithm"},
			{"empty key", func() error { _, err := l.Allow(bg, "", ok); return err }, ratewarden.ErrInvalidKey, "key"},
			{"empty key peek", func() error { _, err := l.Peek(bg, "", ok); return err }, ratewarden.ErrInvalidKey, "key"},
			{"shared scope", func() error { _, err := l.AllowAll(bg, "k", 1, ok, ratewarden.PerMinute(5)); return err }, ratewarden.ErrInvalidLimit, "scope"},
			{"multi cost", func() error { _, err := l.AllowAll(bg, "k", 6, ok, ratewarden.PerHour(5)); return err }, ratewarden.ErrInvalidCost, "cost"},
			{"reset empty key", func() error { return l.Reset(bg, "", ok) }, ratewarden.ErrInvalidKey, "key"},
			{"reset no limits", func() error { return l.Reset(bg, "k") }, ratewarden.ErrInvalidLimit, "limits"},
		} {
			err := tc.call()
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: %s: %v; want %v naming %q", name, tc.name, err, tc.want, tc.field)
			}
		}
		after := commandStats(t, srv)
		for cmd, n := range after {
			// INFO and HELLO are ours (testredis asks on a fresh rueidis
			// connection); PING is rueidis' idle keepalive (every 1 s).
			if cmd == "info" || cmd == "hello" || cmd == "ping" {
				continue
			}
			if d := n - before[cmd]; d != 0 {
				t.Errorf("%s: bad input made %d %s call(s)", name, d, strings.ToUpper(cmd))
			}
		}
	}
}

// waitCap caps a wait for something the test brought about: far above
// what it takes on a busy machine.
const waitCap = 30 * time.Second

// waitCalls waits until *calls has grown by n.
func waitCalls(t *testing.T, calls *atomic.Int64, n int64) {
	t.Helper()
	from := calls.Load()
	testredis.WaitFor(t, waitCap, func() string {
		if got := calls.Load() - from; got < n {
			return fmt.Sprintf("traffic made %d of %d calls", got, n)
		}
		return ""
	})
}
