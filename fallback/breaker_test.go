package fallback

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/denycache"
)

var perMin10 = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}

// The breaker's life on fake time: closed → open after the trip count →
// half-open exactly one probe interval later → open again on a failed
// probe → half-open → closed on a good probe, with hooks and log lines in
// order and no call reaching the primary while open.
func TestBreakerTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 2 * time.Second
		f := newFaulty(t)
		var rec recorder
		s := newStore(t, f, append(rec.options(), WithPolicy(FailOpen), WithProbeInterval(interval), WithTripAfter(3))...)

		if r := mustCheck(t, s, "k", perMin10, 1); r.Source != ratewarden.SourceStore || !r.Allowed {
			t.Fatalf("healthy check: %+v, want allowed by the store", r)
		}
		f.set(failing)
		for i := range 3 {
			if st := s.State(); st != StateClosed {
				t.Fatalf("state after %d failures = %v, want closed", i, st)
			}
			if r := mustCheck(t, s, "k", perMin10, 1); r.Source != ratewarden.SourceFailOpen || !r.Allowed || !r.Degraded() {
				t.Fatalf("check %d while failing: %+v, want allowed by fail_open", i, r)
			}
		}
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after 3 failures = %v, want open", st)
		}
		calls := f.calls.Load() // 1 healthy + 3 failed
		for range 100 {
			mustCheck(t, s, "k", perMin10, 1)
		}
		time.Sleep(interval - time.Millisecond)
		mustCheck(t, s, "k", perMin10, 1)
		if got := f.calls.Load(); got != calls {
			t.Fatalf("primary called %d times while open, want 0", got-calls)
		}
		if st := s.State(); st != StateOpen {
			t.Fatalf("state just before the interval = %v, want open", st)
		}
		time.Sleep(2 * time.Millisecond)
		if st := s.State(); st != StateHalfOpen {
			t.Fatalf("state after the interval = %v, want half_open", st)
		}
		// A failed probe opens it again for a full interval.
		mustCheck(t, s, "k", perMin10, 1)
		if got := f.calls.Load(); got != calls+1 {
			t.Fatalf("half-open let %d calls through, want 1 probe", got-calls)
		}
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after a failed probe = %v, want open", st)
		}
		time.Sleep(interval + time.Millisecond)
		f.set(healthy)
		if r := mustCheck(t, s, "k", perMin10, 1); r.Source != ratewarden.SourceStore {
			t.Fatalf("probe on a healthy primary: %+v, want the store's answer", r)
		}
		if st := s.State(); st != StateClosed {
			t.Fatalf("state after a good probe = %v, want closed", st)
		}
		want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed"}
		if got := rec.Changes(); !slices.Equal(got, want) {
			t.Fatalf("state changes = %v, want %v", got, want)
		}
		log := rec.Log()
		if n := strings.Count(log, "circuit breaker"); n != len(want) {
			t.Fatalf("%d breaker log lines, want %d:\n%s", n, len(want), log)
		}
		if !strings.Contains(log, "level=WARN msg=\"fallback: circuit breaker open") || strings.Contains(log, "k=") || strings.Contains(log, "\"k\"") {
			t.Fatalf("log lines must warn on open and never name a key:\n%s", log)
		}
		// 3 failed checks, 101 while open, 1 failed probe: all degraded.
		if got := rec.Degraded(FailOpen); got != 105 {
			t.Fatalf("OnDegraded(fail_open) called %d times, want 105", got)
		}
	})
}

// The ratio rule opens a breaker whose primary fails every other call,
// which the consecutive rule never would.
func TestBreakerTripRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripRatio(0.5, 10))
		for i := range 9 {
			f.set(fault(i % 2)) // healthy, failing, ...
			mustCheck(t, s, "k", perMin10, 0)
		}
		if st := s.State(); st != StateClosed {
			t.Fatalf("state after 9 calls, 4 failed = %v, want closed", st)
		}
		f.set(failing)
		mustCheck(t, s, "k", perMin10, 0)
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after 10 calls, 5 failed = %v, want open", st)
		}
	})
}

// Failures older than the window no longer count toward the ratio.
func TestBreakerWindowForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripRatio(0.5, 4), WithWindow(time.Second))
		f.set(failing)
		for range 3 {
			mustCheck(t, s, "k", perMin10, 0)
		}
		time.Sleep(2 * time.Second)
		f.set(healthy)
		for range 3 {
			mustCheck(t, s, "k", perMin10, 0)
		}
		f.set(failing)
		mustCheck(t, s, "k", perMin10, 0) // 1 of 4 in the window failed
		if st := s.State(); st != StateClosed {
			t.Fatalf("state = %v, want closed: the old failures left the window", st)
		}
	})
}

// A hanging primary costs exactly the timeout; an earlier caller deadline
// wins and does not count as a backend failure.
func TestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		f.set(hanging)
		s := newStore(t, f, WithLogger(discard), WithPolicy(FailClosed), WithTimeout(30*time.Millisecond), WithTripAfter(2))

		start := time.Now()
		r := mustCheck(t, s, "k", perMin10, 1)
		if took := time.Since(start); took != 30*time.Millisecond {
			t.Fatalf("check on a hanging primary took %v, want the 30ms timeout", took)
		}
		if r.Allowed || r.Source != ratewarden.SourceFailClosed || r.RetryAfter <= 0 {
			t.Fatalf("result = %+v, want denied by fail_closed with a RetryAfter", r)
		}

		// The caller's 10ms deadline: an error, not a policy answer, and
		// not a failure of the backend, however often it happens.
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			start = time.Now()
			res := make([]ratewarden.Result, 1)
			err := s.Check(ctx, &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perMin10}, Cost: 1}, res)
			took := time.Since(start)
			cancel()
			if took != 10*time.Millisecond {
				t.Fatalf("check with a 10ms caller deadline took %v", took)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
				t.Fatalf("err = %v, want one wrapping context.DeadlineExceeded and ErrStoreUnavailable", err)
			}
		}
		if st := s.State(); st != StateClosed {
			t.Fatalf("state = %v after one timeout and five caller deadlines, want closed", st)
		}
		// A context that ended before the call does not reach the primary.
		calls := f.calls.Load()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := s.Check(ctx, &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perMin10}, Cost: 1}, make([]ratewarden.Result, 1))
		if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "fallback: caller gave up: context canceled: ") || f.calls.Load() != calls {
			t.Fatalf("cancelled context: err = %v, primary calls +%d; want context.Canceled and none", err, f.calls.Load()-calls)
		}
		mustCheck(t, s, "k", perMin10, 1) // the second real timeout trips it
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after two timeouts = %v, want open", st)
		}
	})
}

// The earlier deadline owns a timeout: a caller deadline equal to the
// store's (or earlier) makes the timeout the caller's, an error that
// counts for nothing; a caller deadline a moment later leaves it the
// store's, a failure answered by the policy, even though the caller's
// deadline has passed too by the time anyone looks.
func TestDeadlineOwnership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		f.set(hanging)
		s := newStore(t, f, WithLogger(discard), WithPolicy(FailClosed), WithTimeout(30*time.Millisecond), WithTripAfter(1))
		req := &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perMin10}, Cost: 1}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond) // the same deadline
		err := s.Check(ctx, req, make([]ratewarden.Result, 1))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || s.State() != StateClosed {
			t.Fatalf("caller deadline = store deadline: %v, breaker %v; want the caller's DeadlineExceeded, closed", err, s.State())
		}

		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond+time.Microsecond)
		res := make([]ratewarden.Result, 1)
		err = s.Check(ctx, req, res)
		time.Sleep(time.Millisecond) // the caller's deadline passes as well
		cancel()
		if err != nil || res[0].Source != ratewarden.SourceFailClosed || s.State() != StateOpen {
			t.Fatalf("caller deadline after the store's: %v %+v, breaker %v; want fail_closed, counted (open)", err, res[0], s.State())
		}
	})
}

// FailClosed's default RetryAfter is the time left until the next probe.
func TestFailClosedRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		f.set(failing)
		s := newStore(t, f, WithLogger(discard), WithPolicy(FailClosed), WithTripAfter(1), WithProbeInterval(time.Second))
		if r := mustCheck(t, s, "k", perMin10, 1); r.RetryAfter != time.Second {
			t.Fatalf("RetryAfter when the breaker just opened = %v, want 1s", r.RetryAfter)
		}
		time.Sleep(300 * time.Millisecond)
		if r := mustCheck(t, s, "k", perMin10, 1); r.RetryAfter != 700*time.Millisecond || r.Allowed || r.Remaining != 0 {
			t.Fatalf("result 300ms later = %+v, want denied with RetryAfter 700ms", r)
		}

		fixed := newStore(t, f, WithLogger(discard), WithPolicy(FailClosed), WithRetryAfter(5*time.Second))
		if r := mustCheck(t, fixed, "k", perMin10, 1); r.RetryAfter != 5*time.Second || r.ResetAfter != 5*time.Second {
			t.Fatalf("with WithRetryAfter(5s): %+v, want RetryAfter 5s", r)
		}
	})
}

// Bad input, stopped by the Limiter in front of the Store, never reaches
// the primary, never counts toward the breaker and changes no state: not
// the primary's while it is healthy, not the local share's while it is down
// and the breaker open. (On fake time, so no window boundary passes.)
func TestBadInputChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithPolicy(LocalFallback), WithTripAfter(1), WithProbeInterval(time.Hour))
		lim, err := ratewarden.New(s)
		if err != nil {
			t.Fatal(err)
		}
		badLimit := ratewarden.Limit{Rate: -1, Period: time.Second}
		rejectAll := func(stage string) {
			t.Helper()
			for _, tc := range []struct {
				name string
				call func() error
				want error
			}{
				{"empty key", func() error { _, err := lim.Allow(ctx, "", perMin10); return err }, ratewarden.ErrInvalidKey},
				{"bad limit", func() error { _, err := lim.Allow(ctx, "k", badLimit); return err }, ratewarden.ErrInvalidLimit},
				{"cost too high", func() error { _, err := lim.AllowN(ctx, "k", perMin10, 11); return err }, ratewarden.ErrInvalidCost},
				{"negative cost", func() error { _, err := lim.AllowN(ctx, "k", perMin10, -1); return err }, ratewarden.ErrInvalidCost},
				{"reset with an empty key", func() error { return lim.Reset(ctx, "", perMin10) }, ratewarden.ErrInvalidKey},
				{"reset without limits", func() error { return lim.Reset(ctx, "k") }, ratewarden.ErrInvalidLimit},
				{"reset with one bad limit", func() error { return lim.Reset(ctx, "k", perMin10, badLimit) }, ratewarden.ErrInvalidLimit},
			} {
				if err := tc.call(); !errors.Is(err, tc.want) {
					t.Errorf("%s, %s: err = %v, want one wrapping %v", stage, tc.name, err, tc.want)
				}
			}
		}

		// Healthy: 3 of 10 used on the primary, then bad input.
		if _, err := lim.AllowN(ctx, "k", perMin10, 3); err != nil {
			t.Fatal(err)
		}
		calls := f.calls.Load()
		rejectAll("healthy")
		if n := f.calls.Load() - calls; n != 0 {
			t.Fatalf("primary called %d times with bad input, want 0", n)
		}
		if st := s.State(); st != StateClosed {
			t.Fatalf("state after bad input = %v, want closed: bad input is no failure", st)
		}
		if r := mustCheck(t, f.inner, "k", perMin10, 0); r.Remaining != 7 {
			t.Fatalf("primary's state after bad input: %+v, want the 7 left before it", r)
		}

		// Down, breaker open: the local share of key k has 4 of 10 used.
		f.set(failing)
		if r, err := lim.AllowN(ctx, "k", perMin10, 4); err != nil || r.Source != ratewarden.SourceLocalFallback || r.Remaining != 6 {
			t.Fatalf("first check while down: %+v, %v; want 6 left by local_fallback", r, err)
		}
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after a failure = %v, want open", st)
		}
		rejectAll("breaker open")
		if r, err := lim.Peek(ctx, "k", perMin10); err != nil || r.Source != ratewarden.SourceLocalFallback || r.Remaining != 6 {
			t.Fatalf("local share after bad input: %+v, %v; want the 6 left before it", r, err)
		}
	})
}

// The primary's own bad-input verdict passes through unchanged and does not
// count as a failure.
func TestPrimaryBadInputPassesThrough(t *testing.T) {
	f := newFaulty(t)
	s := newStore(t, f, WithLogger(discard), WithTripAfter(1))
	f.set(badInput)
	for range 3 {
		_, err := check(t, s, "k", perMin10, 1)
		if !errors.Is(err, ratewarden.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "faulty: ") {
			t.Fatalf("primary's bad input: err = %v, want it unchanged", err)
		}
	}
	if st := s.State(); st != StateClosed {
		t.Fatalf("state after the primary's bad-input errors = %v, want closed", st)
	}
}

// A primary error that wraps no ratewarden sentinel is a backend failure.
func TestUnconventionalErrorIsFailure(t *testing.T) {
	s := newStore(t, oddStore{}, WithLogger(discard), WithPolicy(FailOpen), WithTripAfter(1))
	if r := mustCheck(t, s, "k", perMin10, 1); r.Source != ratewarden.SourceFailOpen {
		t.Fatalf("result = %+v, want fail_open", r)
	}
	if st := s.State(); st != StateOpen {
		t.Fatalf("state = %v, want open", st)
	}
}

// oddStore fails every check with an error of no ratewarden sentinel; it
// is asked nothing else.
type oddStore struct{ ratewarden.Store }

func (oddStore) Check(context.Context, *ratewarden.Request, []ratewarden.Result) error {
	return errors.New("odd: something broke")
}
func (oddStore) Reset(context.Context, string, ...ratewarden.Limit) error { return nil }

// A hook may call back into the Store: hooks run outside the breaker's lock.
func TestHookMayCallState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		f.set(failing)
		var seen []State
		var s *Store
		s = newStore(t, f, WithLogger(discard), WithTripAfter(1), WithProbeInterval(time.Second),
			WithOnStateChange(func(from, to State) { seen = append(seen, s.State()) }))
		mustCheck(t, s, "k", perMin10, 1)
		time.Sleep(2 * time.Second)
		s.State()
		if want := []State{StateOpen, StateHalfOpen}; !slices.Equal(seen, want) {
			t.Fatalf("State() inside the hook saw %v, want %v", seen, want)
		}
	})
}

// Reset during an outage is an error: the shared state was not reset. The
// local share is reset all the same.
func TestResetDuringOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFaulty(t)
		s := newStore(t, f, WithLogger(discard), WithTripAfter(1))
		lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Hour}
		if err := s.Reset(context.Background(), "k", lim); err != nil {
			t.Fatalf("Reset on a healthy primary: %v", err)
		}
		f.set(failing)
		mustCheck(t, s, "k", lim, 2) // trips; the local share admits 2
		if r := mustCheck(t, s, "k", lim, 1); r.Allowed {
			t.Fatalf("local share exhausted, got %+v", r)
		}
		err := s.Reset(context.Background(), "k", lim)
		if !errors.Is(err, ErrOpen) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Fatalf("Reset while open: err = %v, want ErrOpen wrapping ErrStoreUnavailable", err)
		}
		if r := mustCheck(t, s, "k", lim, 1); !r.Allowed || r.Source != ratewarden.SourceLocalFallback {
			t.Fatalf("after Reset the local share is full again, got %+v", r)
		}
		// Failing, not yet open: the primary's error, unchanged.
		s2 := newStore(t, f, WithLogger(discard))
		if err := s2.Reset(context.Background(), "k", lim); !errors.Is(err, ratewarden.ErrStoreUnavailable) || errors.Is(err, ErrOpen) || !strings.HasPrefix(err.Error(), "faulty: ") {
			t.Fatalf("Reset on a failing primary: err = %v, want the primary's unavailability", err)
		}
	})
}

// A primary with a deny cache inside it (the recommended stack puts
// denycache under fallback) answers some checks without its backend. Such answers are passed on, but say
// nothing about the backend's health: they neither close a half-open
// breaker nor count toward tripping it.
func TestBreakerIgnoresLocalAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		f := newFaulty(t)
		cached, err := denycache.New(f)
		if err != nil {
			t.Fatal(err)
		}
		s := newStore(t, cached, WithPolicy(FailClosed), WithProbeInterval(interval), WithTripAfter(3))
		once := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}
		mustCheck(t, s, "spent", once, 1)
		if r := mustCheck(t, s, "spent", once, 1); r.Allowed || r.Source != ratewarden.SourceStore {
			t.Fatalf("second check: %+v, want the store's denial", r)
		}

		f.set(failing)
		for range 3 {
			mustCheck(t, s, "other", perMin10, 1)
		}
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after 3 failures = %v, want open", st)
		}
		time.Sleep(interval + time.Millisecond)
		if st := s.State(); st != StateHalfOpen {
			t.Fatalf("state after the interval = %v, want half_open", st)
		}
		// The cached denial is answered through the half-open breaker...
		if r := mustCheck(t, s, "spent", once, 1); r.Allowed || r.Source != ratewarden.SourceCache {
			t.Fatalf("cached key while Redis is down: %+v, want the cached denial", r)
		}
		// ...and does not close it: the backend is still down.
		if st := s.State(); st != StateHalfOpen {
			t.Fatalf("state after a locally answered probe = %v, want still half_open", st)
		}
		if r := mustCheck(t, s, "other", perMin10, 1); r.Source != ratewarden.SourceFailClosed {
			t.Fatalf("real probe while down: %+v, want fail_closed", r)
		}
		if st := s.State(); st != StateOpen {
			t.Fatalf("state after a failed probe = %v, want open", st)
		}
	})
}
