package ratewarden_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// tenPerSecond is a token bucket admitting one unit every 100ms, burst 1.
var tenPerSecond = ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second, Burst: 1}

// TestWaitServesInOrder: waiters on a token bucket are admitted one
// emission interval apart, in the order they asked, with one store call
// each.
func TestWaitServesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs, l, _ := newCounting(t)
		start := time.Now()
		const waiters = 5
		got := make([]time.Duration, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := l.Wait(context.Background(), "vendor", tenPerSecond)
				if err != nil || !r.Allowed {
					t.Errorf("waiter %d: %+v, %v", i, r, err)
				}
				got[i] = time.Since(start)
			}()
			synctest.Wait() // waiter i has its reservation before i+1 asks
		}
		wg.Wait()
		for i, d := range got {
			if want := time.Duration(i) * 100 * time.Millisecond; d != want {
				t.Errorf("waiter %d admitted after %v, want %v", i, d, want)
			}
		}
		if n := cs.checks.Load(); n != waiters {
			t.Errorf("%d store calls for %d waiters, want one each", n, waiters)
		}
	})
}

// TestWaitPastDeadline: a wait that could end only after the context's
// deadline fails at once and consumes nothing.
func TestWaitPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l, _ := newCounting(t)
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		for i := range 3 { // slots at 0, 100 and 200ms
			go func() {
				if _, err := l.Wait(ctx, "k", tenPerSecond); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			}()
			synctest.Wait()
		}
		start := time.Now()
		_, err := l.Wait(ctx, "k", tenPerSecond) // the slot at 300ms is past the deadline
		if !errors.Is(err, ratewarden.ErrWouldExceedDeadline) || time.Since(start) != 0 {
			t.Fatalf("wait past the deadline: %v after %v, want ErrWouldExceedDeadline at once", err, time.Since(start))
		}
		if k := ratewarden.Classify(ctx, err); k != ratewarden.CallerCanceled {
			t.Errorf("Classify = %v, want caller_canceled", k)
		}
		synctest.Wait()
		time.Sleep(300 * time.Millisecond)
		// Nothing was consumed by the refused wait: the next slot is 300ms.
		r, err := l.Wait(context.Background(), "k", tenPerSecond)
		if err != nil || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("wait after the refusal: %+v, %v, returned after %v; want the 300ms slot", r, err, time.Since(start))
		}
	})
}

// TestWaitCancelGivesBack: a waiter canceled before its slot gives the
// slot back when nobody reserved after it; otherwise the slot stays spent.
func TestWaitCancelGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l, _ := newCounting(t)
		bg := context.Background()
		if _, err := l.Wait(bg, "k", tenPerSecond); err != nil { // slot 0
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error)
		go func() {
			_, err := l.Wait(ctx, "k", tenPerSecond) // slot 100ms, the last
			done <- err
		}()
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled wait: %v, want context.Canceled", err)
		}
		if _, err := l.Wait(bg, "k", tenPerSecond); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("next waiter admitted after %v, want the given-back slot at 100ms", d)
		}

		// Now two waiters queue (200 and 300ms); canceling the first
		// cannot give its slot back, the second's reservation is on top.
		ctx, cancel = context.WithCancel(bg)
		go func() { done <- func() error { _, err := l.Wait(ctx, "k", tenPerSecond); return err }() }()
		synctest.Wait()
		go func() {
			if _, err := l.Wait(bg, "k", tenPerSecond); err != nil {
				t.Error(err)
			}
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled wait: %v", err)
		}
		synctest.Wait()
		if _, err := l.Wait(bg, "k", tenPerSecond); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 400*time.Millisecond {
			t.Fatalf("waiter after a canceled middle slot admitted after %v, want 400ms (the 200ms slot stays spent)", d)
		}
	})
}

// TestWaitWindow: a window algorithm is waited for by checking again
// after RetryAfter, with at most an eighth of it as jitter.
func TestWaitWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs, l, _ := newCounting(t)
		lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Second}
		bg := context.Background()
		start := time.Now() // a whole second: a window starts
		for range 2 {
			if _, err := l.Wait(bg, "k", lim); err != nil {
				t.Fatal(err)
			}
		}
		r, err := l.Wait(bg, "k", lim)
		d := time.Since(start)
		if err != nil || !r.Allowed || d < time.Second || d > time.Second+time.Second/8 {
			t.Fatalf("third wait in a window of 2: %+v, %v after %v; want admitted in the next window, within 1/8 of a second", r, err, d)
		}
		if n := cs.checks.Load(); n != 4 {
			t.Errorf("%d store calls, want 4 (the third waiter checked twice)", n)
		}
		ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
		defer cancel()
		_, _ = l.Wait(bg, "k", lim)
		if _, err := l.Wait(ctx, "k", lim); !errors.Is(err, ratewarden.ErrWouldExceedDeadline) {
			t.Fatalf("window wait past the deadline: %v, want ErrWouldExceedDeadline", err)
		}
	})
}

func TestWaitInput(t *testing.T) {
	_, l, _ := newCounting(t)
	bg := context.Background()
	if _, err := l.WaitN(bg, "", tenPerSecond, 1); !errors.Is(err, ratewarden.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := l.WaitN(bg, "k", tenPerSecond, 2); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Errorf("cost above the burst: %v", err)
	}
	if r, err := l.WaitN(bg, "k", tenPerSecond, 0); err != nil || !r.Allowed || r.Remaining != 1 {
		t.Errorf("cost 0: %+v, %v; want the state at once", r, err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := l.Wait(ctx, "k", tenPerSecond); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
}

// bareStore checks and resets on the Store it embeds, and does nothing
// else: its Charge and permit calls fail with errors.ErrUnsupported.
type bareStore struct{ ratewarden.Store }

func (bareStore) Charge(context.Context, string, []ratewarden.Limit, []ratewarden.Spent, []int64) error {
	return fmt.Errorf("bare: charge: %w", errors.ErrUnsupported)
}

func (bareStore) Acquire(context.Context, string, string, int64, time.Duration) (ratewarden.PermitResult, error) {
	return ratewarden.PermitResult{}, fmt.Errorf("bare: acquire: %w", errors.ErrUnsupported)
}

// A Store's ErrUnsupported reaches the caller as it is: the Limiter probes
// no capability.
func TestUnsupportedPassesThrough(t *testing.T) {
	ms, _ := memstore.New()
	l, _ := ratewarden.New(bareStore{ms})
	rv, err := l.Reserve(context.Background(), "k", 5, ratewarden.PerMinute(10))
	if err != nil || !rv.Allowed {
		t.Fatalf("Reserve = %+v, %v; want admitted (checks are supported)", rv, err)
	}
	if _, err := rv.Settle(context.Background(), 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Settle on a store that cannot charge: %v, want errors.ErrUnsupported", err)
	}
	if _, err := l.Acquire(context.Background(), "k", 1, time.Second); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Acquire on a store without permits: %v, want errors.ErrUnsupported", err)
	}
}

// policyStore answers every check as a failure policy would, with the
// given Source, and records the charges it is asked to make.
type policyStore struct {
	bareStore
	src     ratewarden.Source
	mu      sync.Mutex
	charged [][]ratewarden.Limit
}

func (s *policyStore) Check(_ context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	for i, l := range req.Limits {
		res[i] = ratewarden.Result{Allowed: true, Limit: l, Remaining: l.Capacity() - req.Cost, Source: s.src}
	}
	return nil
}

func (s *policyStore) Charge(_ context.Context, _ string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.charged = append(s.charged, limits)
	for i := range applied {
		applied[i] = spent[0].Units
	}
	return nil
}

func TestSettleSkipsFailOpen(t *testing.T) {
	ps := &policyStore{src: ratewarden.SourceFailOpen}
	l, _ := ratewarden.New(ps)
	rv, err := l.Reserve(context.Background(), "k", 10, ratewarden.PerMinute(100))
	if err != nil || !rv.Allowed {
		t.Fatal(rv, err)
	}
	st, err := rv.Settle(context.Background(), 3)
	if err != nil || st.Delta != -7 || st.Applied[0] != 0 || len(ps.charged) != 0 {
		t.Fatalf("settling a FailOpen admission: %+v, %v, %d charges; want nothing charged (nothing was counted)", st, err, len(ps.charged))
	}
	ps.src = ratewarden.SourceLocalFallback
	rv, _ = l.Reserve(context.Background(), "k", 10, ratewarden.PerMinute(100))
	if st, err = rv.Settle(context.Background(), 3); err != nil || st.Applied[0] != -7 || len(ps.charged) != 1 {
		t.Fatalf("settling a LocalFallback admission: %+v, %v, %d charges; want one charge of -7", st, err, len(ps.charged))
	}
}

func TestReserveInput(t *testing.T) {
	_, l, _ := newCounting(t)
	bg := context.Background()
	if _, err := l.Reserve(bg, "k", 11, ratewarden.PerMinute(10)); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Errorf("estimate above capacity: %v", err)
	}
	if _, err := l.Reserve(bg, "k", 1); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Errorf("no limits: %v", err)
	}
	rv, err := l.Reserve(bg, "k", 5, ratewarden.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rv.Settle(bg, ratewarden.MaxRate+1); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Errorf("actual above MaxRate: %v", err)
	}
	if st, err := rv.Settle(bg, 5); err != nil || st.Delta != 0 || st.Applied != nil {
		t.Errorf("settling at the estimate: %+v, %v; want nothing to do", st, err)
	}
	if _, err := rv.Cancel(bg); !errors.Is(err, ratewarden.ErrSettled) || ratewarden.Classify(bg, err) != ratewarden.InvalidInput {
		t.Errorf("Cancel after Settle: %v", err)
	}
}

// TestAcquireWait: a waiter gets the permit the holder releases; one whose
// context ends first holds nothing.
func TestAcquireWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l, _ := newCounting(t)
		bg := context.Background()
		p, err := l.Acquire(bg, "job", 1, time.Minute)
		if err != nil || !p.Acquired {
			t.Fatal(p, err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			if err := p.Release(bg); err != nil {
				t.Error(err)
			}
		}()
		start := time.Now()
		q, err := l.AcquireWait(bg, "job", 1, time.Minute)
		d := time.Since(start)
		if err != nil || !q.Acquired || d < 300*time.Millisecond || d > 500*time.Millisecond {
			t.Fatalf("AcquireWait: %+v, %v after %v; want the permit soon after its release at 300ms", q, err, d)
		}
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		if r, err := l.AcquireWait(ctx, "job", 1, time.Minute); !errors.Is(err, context.DeadlineExceeded) || r != nil {
			t.Fatalf("AcquireWait with the permit held past the deadline: %+v, %v", r, err)
		}
		if err := q.Release(bg); err != nil {
			t.Fatal(err)
		}
		if r, err := l.Acquire(bg, "job", 1, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("the timed-out waiter holds a permit: %+v, %v", r, err)
		}
	})
}

// TestPermitExtendKeepsIt: a permit extended before its ttl stays held
// past the ttl it was acquired with.
func TestPermitExtendKeepsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l, _ := newCounting(t)
		bg := context.Background()
		p, _ := l.Acquire(bg, "job", 1, time.Second)
		time.Sleep(900 * time.Millisecond)
		if err := p.Extend(bg, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(900 * time.Millisecond)
		if q, _ := l.Acquire(bg, "job", 1, time.Second); q.Acquired {
			t.Fatal("an extended permit expired at its first ttl")
		}
		if err := p.Extend(bg, 0); !errors.Is(err, ratewarden.ErrInvalidLimit) {
			t.Fatalf("Extend(0): %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := p.Extend(bg, time.Second); !errors.Is(err, ratewarden.ErrPermitLost) {
			t.Fatalf("Extend after the extended ttl: %v, want ErrPermitLost", err)
		}
	})
}

// TestPermitOf: a permit named by key and holder, as another replica (or a
// service's client) knows it, releases and extends the permit Acquire took.
func TestPermitOf(t *testing.T) {
	_, l, _ := newCounting(t)
	bg := context.Background()
	p, err := l.Acquire(bg, "jobs", 1, time.Minute)
	if err != nil || !p.Acquired || p.Key() != "jobs" || len(p.Holder()) < 26 {
		t.Fatalf("Acquire: %+v, %v; want a permit with a 128-bit holder", p, err)
	}
	q, err := l.PermitOf(p.Key(), p.Holder())
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Extend(bg, time.Hour); err != nil {
		t.Fatalf("Extend through PermitOf: %v", err)
	}
	if err := q.Release(bg); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Acquire(bg, "jobs", 1, time.Minute); !r.Acquired {
		t.Fatal("the permit released through PermitOf is still held")
	}
	guessed, _ := l.PermitOf("jobs", "not-the-holder")
	if err := guessed.Extend(bg, time.Hour); !errors.Is(err, ratewarden.ErrPermitLost) {
		t.Fatalf("Extend of a guessed holder: %v, want ErrPermitLost", err)
	}
	for _, tc := range [][2]string{{"", "h"}, {"k", ""}} {
		if _, err := l.PermitOf(tc[0], tc[1]); !errors.Is(err, ratewarden.ErrInvalidKey) {
			t.Errorf("PermitOf(%q, %q): %v, want ErrInvalidKey", tc[0], tc[1], err)
		}
	}
	if err := ratewarden.ValidatePermit(0, time.Minute); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Errorf("ValidatePermit(0, 1m): %v", err)
	}
}

// TestReservationOf: a reservation rebuilt from what Reserve returned
// settles exactly as the original would, FailOpen limits left out.
func TestReservationOf(t *testing.T) {
	_, l, _ := newCounting(t)
	bg := context.Background()
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	rv, err := l.Reserve(bg, "tenant", 100, lim)
	if err != nil || !rv.Allowed {
		t.Fatal(rv, err)
	}
	again, err := l.ReservationOf("tenant", 100, rv.Admitted(), rv.Decision)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := again.Settle(bg, 30); err != nil || st.Applied[0] != -70 {
		t.Fatalf("Settle of the rebuilt reservation: %+v, %v; want 70 given back", st, err)
	}
	if r, _ := l.Peek(bg, "tenant", lim); r.Remaining != 970 {
		t.Fatalf("Remaining %d after settling 30 of 100, want 970", r.Remaining)
	}
	open := rv.Decision
	open.Results = []ratewarden.Result{open.Results[0]}
	open.Results[0].Source = ratewarden.SourceFailOpen
	fo, _ := l.ReservationOf("tenant", 100, rv.Admitted(), open)
	if st, err := fo.Settle(bg, 0); err != nil || st.Applied[0] != 0 {
		t.Fatalf("Settle of a rebuilt FailOpen admission: %+v, %v; want nothing applied", st, err)
	}
	bad := rv.Decision
	if _, err := l.ReservationOf("tenant", 1001, rv.Admitted(), bad); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Fatalf("ReservationOf with an estimate above capacity: %v", err)
	}
	if _, err := l.ReservationOf("tenant", 1, rv.Admitted(), ratewarden.Decision{Allowed: true}); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Fatalf("ReservationOf without limits: %v", err)
	}
}

// TestSettleFromAhead: a reservation whose Admitted reads as the future
// here (another replica's clock ahead) settles as made now, not as a
// token-bucket give-back.
func TestSettleFromAhead(t *testing.T) {
	_, l, _ := newCounting(t)
	bg := context.Background()
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Hour}
	rv, err := l.Reserve(bg, "k", 50, lim)
	if err != nil || !rv.Allowed || !rv.Counted() {
		t.Fatal(rv, err)
	}
	ahead, err := l.ReservationOf("k", 50, time.Now().Add(time.Minute), rv.Decision)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ahead.Settle(bg, 10); err != nil || st.Applied[0] != -40 {
		t.Fatalf("Settle of a reservation admitted a minute ahead: %+v, %v; want 40 given back", st, err)
	}
	denied, _ := l.Reserve(bg, "k", 100, lim)
	if denied.Allowed || denied.Counted() {
		t.Fatalf("a denied reservation: Allowed %v, Counted %v", denied.Allowed, denied.Counted())
	}
}
