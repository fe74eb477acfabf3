package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// The subtests beyond admission: reservations (Request.MaxDelay, the store
// side of Limiter.Wait), settlement (Store.Charge, through
// Limiter.Reserve) and concurrency limits (Store.Acquire, Release and
// Extend, through Limiter.Acquire).

func (e *env) check(t *testing.T, req *ratewarden.Request) []ratewarden.Result {
	t.Helper()
	res := make([]ratewarden.Result, len(req.Limits))
	if err := e.Store.Check(ctx, req, res); err != nil {
		t.Fatalf("Check(%+v): %v", *req, err)
	}
	for i := range res {
		checkResult(t, res[i], req.Limits[i])
		if !res[i].Allowed && res[i].Delay != 0 {
			t.Fatalf("denied with Delay %v, want 0", res[i].Delay)
		}
	}
	return res
}

// stableBucket is a token bucket of rate 10 per stable period (an
// emission interval of about six minutes), burst 2: delays measured in
// minutes, so the milliseconds between the calls of a store on real time
// do not blur them.
func (e *env) stableBucket(t *testing.T) (ratewarden.Limit, time.Duration) {
	l := e.stable(t, ratewarden.TokenBucket, 10)
	l.Burst = 2
	return l, l.Period / 10
}

// nearDelay asserts that d is k emission intervals iv, less at most the
// minute that may pass between the calls of a store on real time.
func nearDelay(t *testing.T, what string, d time.Duration, k int64, iv time.Duration) {
	t.Helper()
	if want := time.Duration(k) * iv; d > want || d < want-time.Minute {
		t.Fatalf("%s: Delay %v, want %d emission intervals (%v), at most a minute less", what, d, k, want)
	}
}

// testReserve: a reservation admits ahead of time, in order, and consumes
// nothing when its wait is longer than MaxDelay.
func testReserve(t *testing.T, e *env) {
	l, iv := e.stableBucket(t)
	k := e.key("k")
	one := []ratewarden.Limit{l}
	// A full bucket admits its burst at once, with no delay.
	for i := range 2 {
		r := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour})[0]
		if !r.Allowed || r.Delay != 0 {
			t.Fatalf("reservation %d on a full bucket: %+v, want allowed at once", i+1, r)
		}
	}
	// Then each unit is reserved one emission interval after the last.
	for i := range int64(3) {
		r := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour})[0]
		if !r.Allowed {
			t.Fatalf("reservation %d: %+v, want allowed ahead of time", i+3, r)
		}
		nearDelay(t, fmt.Sprintf("reservation %d", i+3), r.Delay, i+1, iv)
	}
	// The next waits 4 intervals: a MaxDelay of 3 intervals denies it,
	// and consumes nothing.
	r := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: 3 * iv})[0]
	if r.Allowed || r.RetryAfter <= 3*iv-time.Minute || r.RetryAfter > 4*iv {
		t.Fatalf("reservation past MaxDelay: %+v, want denied with RetryAfter about %v", r, 4*iv)
	}
	// A peek reports the delay without consuming: twice the same.
	for range 2 {
		p := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour, Peek: true})[0]
		if !p.Allowed {
			t.Fatalf("peeked reservation: %+v, want allowed", p)
		}
		nearDelay(t, "peeked reservation", p.Delay, 4, iv)
	}
	r = e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour})[0]
	nearDelay(t, "reservation after the peeks and the denial", r.Delay, 4, iv)
}

// testReserveMulti: a multi-limit reservation waits for the slowest bucket
// and consumes from every one; any window limit turns MaxDelay off.
func testReserveMulti(t *testing.T, e *env) {
	fast, _ := e.stableBucket(t)
	// Twice the period at half the rate: an emission interval four times
	// as long, and a scope of its own.
	slow := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: 2 * fast.Period, Burst: 1}
	k := e.key("multi")
	both := []ratewarden.Limit{fast, slow}
	first := e.check(t, &ratewarden.Request{Key: k, Limits: both, Cost: 1, MaxDelay: 3 * time.Hour})
	for i, r := range first {
		if !r.Allowed || r.Delay != 0 {
			t.Fatalf("first reservation, limit %d: %+v, want allowed at once", i, r)
		}
	}
	second := e.check(t, &ratewarden.Request{Key: k, Limits: both, Cost: 1, MaxDelay: 3 * time.Hour})
	slowIv := slow.Period / time.Duration(slow.Rate)
	for i, r := range second {
		if !r.Allowed {
			t.Fatalf("second reservation, limit %d: %+v, want allowed ahead of time", i, r)
		}
		nearDelay(t, fmt.Sprintf("second reservation, limit %d", i), r.Delay, 1, slowIv)
	}
	// Both buckets consumed: the fast one holds 1 now and, from the slow
	// one's instant, 1 more.
	if p := e.check(t, &ratewarden.Request{Key: k, Limits: []ratewarden.Limit{fast}, Cost: 0})[0]; p.Remaining != 0 {
		t.Fatalf("fast bucket after two reservations: Remaining %d, want 0 (one now, one reserved later)", p.Remaining)
	}

	// A window limit among the limits: MaxDelay is ignored.
	w := e.stable(t, ratewarden.FixedWindow, 1)
	k2 := e.key("mixed")
	mixed := []ratewarden.Limit{fast, w}
	e.check(t, &ratewarden.Request{Key: k2, Limits: mixed, Cost: 1, MaxDelay: time.Hour})
	res := e.check(t, &ratewarden.Request{Key: k2, Limits: mixed, Cost: 1, MaxDelay: time.Hour})
	if res[1].Allowed || res[0].Delay != 0 {
		t.Fatalf("check with a window limit and MaxDelay: %+v, want the plain check's denial by the window", res)
	}
	if p := e.check(t, &ratewarden.Request{Key: k2, Limits: []ratewarden.Limit{fast}, Cost: 0})[0]; p.Remaining != 1 {
		t.Fatalf("bucket after a denied mixed check: Remaining %d, want 1 (nothing consumed)", p.Remaining)
	}
}

// testGiveBack: a reservation given back (a refund dated at the TAT it
// left) frees its slot only when nothing was reserved after it.
func testGiveBack(t *testing.T, e *env) {
	l, iv := e.stableBucket(t)
	k := e.key("k")
	one := []ratewarden.Limit{l}
	c := e.Store
	e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 2})
	a := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour})[0]
	b := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour})[0]
	nearDelay(t, "reservation b", b.Delay, 2, iv)
	applied := make([]int64, 1)
	// a is not the last: giving it back would double-book b's successor.
	if err := c.Charge(ctx, k, one, []ratewarden.Spent{{Units: -1, Ago: -a.ResetAfter}}, applied); err != nil {
		t.Fatal(err)
	}
	if applied[0] != 0 {
		t.Fatalf("giving back a reservation with a later one on top: applied %d, want 0", applied[0])
	}
	// b is the last: it goes back, and the next reservation takes its slot.
	if err := c.Charge(ctx, k, one, []ratewarden.Spent{{Units: -1, Ago: -b.ResetAfter}}, applied); err != nil {
		t.Fatal(err)
	}
	if applied[0] != -1 {
		t.Fatalf("giving back the last reservation: applied %d, want -1", applied[0])
	}
	r := e.check(t, &ratewarden.Request{Key: k, Limits: one, Cost: 1, MaxDelay: time.Hour})[0]
	nearDelay(t, "reservation after the give-back", r.Delay, 2, iv)
}

// settling is stable, but a token bucket gets a day for its period: a
// bucket of 1000 then drains one unit in 86s, so no unit comes back while
// a test settles, however slow the machine (a period of about an hour
// would give one back every 3.6s).
func (e *env) settling(t *testing.T, alg ratewarden.Algorithm, rate int64) ratewarden.Limit {
	t.Helper()
	l := e.stable(t, alg, rate)
	if alg == ratewarden.TokenBucket {
		l.Period = 24 * time.Hour
	}
	return l
}

// testSettle: Reserve then Settle, through the Limiter: the difference is
// charged or given back exactly, once.
func testSettle(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.settling(t, alg, 1000)
	k := e.key("k")
	rv, err := e.lim.Reserve(ctx, k, 100, l)
	if err != nil || !rv.Allowed {
		t.Fatalf("Reserve 100 of %v: %+v, %v; want allowed", l, rv, err)
	}
	want(t, "after reserving 100", e.peek(t, k, l), true, 900)
	st, err := rv.Settle(ctx, 30)
	if err != nil {
		t.Fatalf("Settle(30): %v", err)
	}
	if st.Delta != -70 || len(st.Applied) != 1 || st.Applied[0] != -70 {
		t.Fatalf("Settle(30) of 100: %+v, want Delta -70 applied in full", st)
	}
	want(t, "after settling 30", e.peek(t, k, l), true, 970)
	if _, err := rv.Settle(ctx, 30); !errors.Is(err, ratewarden.ErrSettled) {
		t.Fatalf("second Settle: %v, want ErrSettled", err)
	}
	want(t, "after a refused second settle", e.peek(t, k, l), true, 970)

	rv, err = e.lim.Reserve(ctx, k, 100, l)
	if err != nil || !rv.Allowed {
		t.Fatalf("second Reserve: %+v, %v", rv, err)
	}
	if st, err = rv.Settle(ctx, 130); err != nil || st.Delta != 30 || st.Applied[0] != 30 {
		t.Fatalf("Settle(130) of 100: %+v, %v; want 30 charged", st, err)
	}
	want(t, "after settling 130", e.peek(t, k, l), true, 840)

	// A denied reservation consumed nothing and settles to nothing.
	rv, err = e.lim.Reserve(ctx, k, 900, l)
	if err != nil || rv.Allowed {
		t.Fatalf("Reserve 900 with 840 left: %+v, %v; want denied", rv, err)
	}
	if st, err = rv.Settle(ctx, 900); err != nil || st.Applied != nil {
		t.Fatalf("Settle of a denied reservation: %+v, %v; want nothing applied", st, err)
	}
	want(t, "after a denied reservation", e.peek(t, k, l), true, 840)
	if _, err := rv.Settle(ctx, -1); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Fatalf("Settle(-1): %v, want ErrInvalidCost", err)
	}
}

// testSettleMulti: a reservation on several limits settles each.
func testSettleMulti(t *testing.T, e *env, alg ratewarden.Algorithm) {
	a := e.settling(t, alg, 1000)
	b := e.otherLimit(t, a, 500)
	k := e.key("k")
	rv, err := e.lim.Reserve(ctx, k, 200, a, b)
	if err != nil || !rv.Allowed {
		t.Fatalf("Reserve: %+v, %v", rv, err)
	}
	st, err := rv.Cancel(ctx)
	if err != nil || st.Delta != -200 || st.Applied[0] != -200 || st.Applied[1] != -200 {
		t.Fatalf("Cancel: %+v, %v; want 200 given back to both limits", st, err)
	}
	want(t, "limit a after the cancel", e.peek(t, k, a), true, 1000)
	want(t, "limit b after the cancel", e.peek(t, k, b), true, 500)
}

// testSettleRacing: concurrent reservations settled concurrently leave
// exactly the sum of the actual costs.
func testSettleRacing(t *testing.T, e *env, alg ratewarden.Algorithm) {
	// At most 8 × 20 units outstanding.
	l := e.settling(t, alg, 1000)
	k := e.key("k")
	const workers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rv, err := e.lim.Reserve(ctx, k, 20, l)
				if err == nil && !rv.Allowed {
					err = fmt.Errorf("reservation denied: %+v", rv.Decision)
				}
				if err == nil {
					_, err = rv.Settle(ctx, int64((w+i)%8)) // 0 to 7
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var sum int64
	for w := range workers {
		for i := range each {
			sum += int64((w + i) % 8)
		}
	}
	want(t, "after racing settlements", e.peek(t, k, l), true, l.Rate-sum)
}

// testSettleExpired: a settlement after the reservation's effect has ended
// applies to nothing, and says so.
func testSettleExpired(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l, _ := e.short(t, alg, 10, shortPeriod)
	k := e.key("k")
	rv, err := e.lim.Reserve(ctx, k, 5, l)
	if err != nil || !rv.Allowed {
		t.Fatalf("Reserve: %+v, %v", rv, err)
	}
	// Two periods on, no window, log entry or bucket debt of it is left.
	e.Advance(2*l.Period + margin)
	st, err := rv.Settle(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Delta != -5 || st.Applied[0] != 0 {
		t.Fatalf("Settle two periods on: %+v, want Delta -5 with nothing applied", st)
	}
	want(t, "after the late settlement", e.peek(t, k, l), true, l.Capacity())
}

// testRefundFloor: a refund never takes a count below zero, and Charge
// reports what it applied.
func testRefundFloor(t *testing.T, e *env, alg ratewarden.Algorithm) {
	c := e.Store
	l := e.settling(t, alg, 100)
	k := e.key("k")
	e.allowN(t, k, l, 10)
	applied := make([]int64, 1)
	if err := c.Charge(ctx, k, []ratewarden.Limit{l}, []ratewarden.Spent{{Units: -4}}, applied); err != nil || applied[0] != -4 {
		t.Fatalf("refund 4 of 10: applied %d, %v; want -4", applied[0], err)
	}
	want(t, "after refunding 4", e.peek(t, k, l), true, 94)
	if err := c.Charge(ctx, k, []ratewarden.Limit{l}, []ratewarden.Spent{{Units: -50}}, applied); err != nil || applied[0] != -6 {
		t.Fatalf("refund 50 of 6: applied %d, %v; want -6", applied[0], err)
	}
	want(t, "after refunding more than was counted", e.peek(t, k, l), true, 100)
	if err := c.Charge(ctx, k, []ratewarden.Limit{l}, []ratewarden.Spent{{Units: 0}}, applied); !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Fatalf("Charge of 0 units: %v, want ErrInvalidCost", err)
	}
}

func (e *env) acquire(t *testing.T, key string, max int64, ttl time.Duration) *ratewarden.Permit {
	t.Helper()
	p, err := e.lim.Acquire(ctx, key, max, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %d, %v): %v", key, max, ttl, err)
	}
	if p.Source.Degraded() {
		t.Fatalf("Acquire: Source %v, degraded, but the store is healthy", p.Source)
	}
	if p.Held < 0 || p.Held > max || p.Acquired && p.Held < 1 {
		t.Fatalf("Acquire: Held %d, want within [1, %d] when acquired", p.Held, max)
	}
	if p.Acquired != (p.RetryAfter == 0) {
		t.Fatalf("Acquire: Acquired %v with RetryAfter %v", p.Acquired, p.RetryAfter)
	}
	return p
}

// testPermits: at most max permits are held; releasing frees one at once.
func testPermits(t *testing.T, e *env) {
	k := e.key("k")
	var held []*ratewarden.Permit
	for i := range int64(3) {
		p := e.acquire(t, k, 3, time.Hour)
		if !p.Acquired || p.Held != i+1 {
			t.Fatalf("permit %d of 3: %+v, want acquired with Held %d", i+1, p, i+1)
		}
		held = append(held, p)
	}
	p := e.acquire(t, k, 3, time.Hour)
	if p.Acquired || p.Held != 3 || p.RetryAfter > time.Hour || p.RetryAfter < 59*time.Minute {
		t.Fatalf("permit 4 of 3: %+v, want refused, Held 3, RetryAfter about an hour", p)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release of a refused permit: %v", err)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatalf("second Release: %v, want nil", err)
	}
	if p := e.acquire(t, k, 3, time.Hour); !p.Acquired || p.Held != 3 {
		t.Fatalf("permit after a release: %+v, want acquired with Held 3", p)
	}
	// A larger max on the same key counts the same permits.
	if p := e.acquire(t, k, 4, time.Hour); !p.Acquired || p.Held != 4 {
		t.Fatalf("permit with max 4: %+v, want acquired with Held 4", p)
	}
	if err := held[0].Extend(ctx, 2*time.Hour); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := held[1].Extend(ctx, time.Hour); !errors.Is(err, ratewarden.ErrPermitLost) {
		t.Fatalf("Extend of a released permit: %v, want ErrPermitLost", err)
	}
	// Other keys are independent.
	if p := e.acquire(t, e.key("other"), 1, time.Hour); !p.Acquired || p.Held != 1 {
		t.Fatalf("permit of another key: %+v, want acquired", p)
	}
}

// testPermitExpiry: a permit not released is free again after its ttl,
// and can no longer be extended.
func testPermitExpiry(t *testing.T, e *env) {
	retryLate(t, shortPeriod, func(p time.Duration, attempt int) string {
		return checkPermitExpiry(t, e, p, attempt)
	})
}

func checkPermitExpiry(t *testing.T, e *env, ttl time.Duration, attempt int) string {
	k := e.key(fmt.Sprintf("k%d", attempt))
	sent := time.Now()
	a := e.acquire(t, k, 1, ttl)
	if !a.Acquired {
		t.Fatalf("first permit: %+v", a)
	}
	p := e.acquire(t, k, 1, ttl)
	if l := late("the second acquire", sent.Add(ttl)); l != "" && p.Acquired {
		return l // the first may have expired by then: no verdict
	}
	if p.Acquired || p.RetryAfter > ttl {
		t.Fatalf("second permit of 1: %+v, want refused, RetryAfter <= %v", p, ttl)
	}
	e.Advance(ttl + margin)
	if err := a.Extend(ctx, time.Hour); !errors.Is(err, ratewarden.ErrPermitLost) {
		t.Fatalf("Extend after the ttl: %v, want ErrPermitLost", err)
	}
	if p := e.acquire(t, k, 1, time.Hour); !p.Acquired {
		t.Fatalf("permit after the first expired: %+v, want acquired", p)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of an expired permit: %v, want nil", err)
	}
	if p := e.acquire(t, k, 1, time.Hour); p.Acquired {
		t.Fatalf("Release of the expired permit freed its successor's: %+v", p)
	}
	return ""
}

// testPermitsConcurrent: many goroutines racing for max permits get
// exactly max.
func testPermitsConcurrent(t *testing.T, e *env) {
	k := e.key("k")
	const goroutines, max = 40, 7
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.lim.Acquire(ctx, k, max, time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			if p.Acquired {
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got != max {
		t.Fatalf("%d goroutines racing for %d permits acquired %d", goroutines, max, got)
	}
}

// testPermitBadInput: invalid max, ttl or key are errors naming the field,
// and change nothing.
func testPermitBadInput(t *testing.T, e *env) {
	k := e.key("k")
	for _, tc := range []struct {
		key  string
		max  int64
		ttl  time.Duration
		want error
	}{
		{k, 0, time.Hour, ratewarden.ErrInvalidLimit},
		{k, ratewarden.MaxPermits + 1, time.Hour, ratewarden.ErrInvalidLimit},
		{k, 1, 0, ratewarden.ErrInvalidLimit},
		{k, 1, ratewarden.MaxPeriod + time.Millisecond, ratewarden.ErrInvalidLimit},
		{"", 1, time.Hour, ratewarden.ErrInvalidKey},
	} {
		if _, err := e.lim.Acquire(ctx, tc.key, tc.max, tc.ttl); !errors.Is(err, tc.want) {
			t.Fatalf("Acquire(%q, %d, %v): %v, want %v", tc.key, tc.max, tc.ttl, err, tc.want)
		}
	}
	if p := e.acquire(t, k, 1, time.Hour); !p.Acquired || p.Held != 1 {
		t.Fatalf("permit after the refused calls: %+v, want the first", p)
	}
}
