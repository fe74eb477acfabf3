// Package storetest is the conformance suite every ratewarden.Store must
// pass. A backend's tests call Run with a constructor for a fresh Subject:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Subject {
//			clk := newFakeClock()
//			s, err := memstore.New(memstore.WithClock(clk.Now))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return storetest.Subject{Store: s, Advance: clk.Advance}
//		})
//	}
//
// The suite drives the Store through a ratewarden.Limiter (and directly,
// for multi-limit peeks), for all four algorithms. It works both with a
// fake clock and with real time (Redis): time-based subtests use periods of
// half a second, add a small margin to every wait and align window
// tests to the store's own window boundary; counting subtests use periods
// of about an hour, chosen so that no window boundary of the store's clock
// falls inside the test. Subtests run in parallel; each gets its own
// Subject and its own keys.
//
// A time-based subtest assumes nothing about how fast the machine is: it
// measures, on the local clock, whether its calls came in time for what it
// asserts (on a busy machine a goroutine can stall for longer than a short
// period), and when they did not and the check failed, it runs again with a
// period four times as long, up to three times. An assertion is made only
// where the calls provably came in time, so a wrong store still fails.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Subject is one Store under test.
type Subject struct {
	// Store is the store under test, fresh for each subtest.
	Store ratewarden.Store
	// Advance moves the store's clock forward by at least d: a fake clock
	// moves exactly d, a store on real time (Redis) sleeps d.
	Advance func(d time.Duration)
}

// shortPeriod is the period of time-based subtests: short enough to keep
// real sleeps small, long enough for a few round trips on a busy machine.
const shortPeriod = 500 * time.Millisecond

// margin is added to waits so that a store on real time is past the
// instant it named; with a fake clock it is just a little extra time.
const margin = 5 * time.Millisecond

// attempts is how often a time-based subtest runs, each time with a period
// four times as long, when its calls came too late to check its claim.
const attempts = 3

// retryLate runs check with period p = base and, as long as check reports
// that its calls came too late for what it asserts, again with a period
// four times as long, up to attempts times. check fails t on what is wrong
// whatever the timing, and on what is wrong although its calls came in
// time; it returns "" when done, or what came late. attempt numbers the
// runs from 0, for fresh keys.
func retryLate(t *testing.T, base time.Duration, check func(p time.Duration, attempt int) (late string)) {
	t.Helper()
	p := base
	var lates []string
	for attempt := range attempts {
		late := check(p, attempt)
		if late == "" {
			return
		}
		lates = append(lates, fmt.Sprintf("period %v: %s", p, late))
		p *= 4
	}
	t.Fatalf("storetest: too slow to check, in each of %d attempts (is the machine overloaded?):\n  %s", attempts, strings.Join(lates, "\n  "))
}

// late says what came too late when the local clock is past by, or "".
// On a store on real time the local clock runs with the store's; with a
// fake clock only Advance moves the store's, so nothing it checks is late,
// and a late report only costs a rerun.
func late(what string, by time.Time) string {
	if over := time.Since(by); over > 0 {
		return fmt.Sprintf("%s came %v too late", what, over.Round(time.Millisecond))
	}
	return ""
}

// algorithms lists every algorithm the suite runs each table against.
var algorithms = []ratewarden.Algorithm{
	ratewarden.SlidingWindow, ratewarden.FixedWindow, ratewarden.TokenBucket, ratewarden.SlidingLog,
}

// Run runs the conformance suite. newSubject is called once per subtest with
// that subtest's t; register cleanup on it.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env, ratewarden.Algorithm)
	}{
		{"AdmitsCapacityThenDenies", testAdmitsCapacity},
		{"DeniedConsumesNothing", testDeniedConsumesNothing},
		{"PeekConsumesNothing", testPeek},
		{"CostZero", testCostZero},
		{"CostN", testCostN},
		{"RetryAfter", testRetryAfter},
		{"ResetAfter", testResetAfter},
		{"Reset", testReset},
		{"MultiLimitAllOrNothing", testMultiLimit},
		{"StorePeekMultiLimit", testStorePeekMulti},
		{"IndependentKeys", testIndependentKeys},
		{"OddKeys", testOddKeys},
		{"Concurrent", testConcurrent},
		{"Settle", testSettle},
		{"SettleMultiLimit", testSettleMulti},
		{"SettleRacing", testSettleRacing},
		{"SettleAfterItsWindow", testSettleExpired},
		{"RefundFloor", testRefundFloor},
		{"RateChangeKeepsState", testRateChange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, alg := range algorithms {
				t.Run(alg.String(), func(t *testing.T) {
					t.Parallel()
					tc.fn(t, newEnv(t, newSubject), alg)
				})
			}
		})
	}
	t.Run("FixedWindowRollover", func(t *testing.T) {
		t.Parallel()
		testFixedRollover(t, newEnv(t, newSubject))
	})
	t.Run("SlidingWindowDecay", func(t *testing.T) {
		t.Parallel()
		testSlidingDecay(t, newEnv(t, newSubject))
	})
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Reserve", testReserve},
		{"ReserveMultiLimit", testReserveMulti},
		{"ReserveGiveBack", testGiveBack},
		{"Permits", testPermits},
		{"PermitExpiry", testPermitExpiry},
		{"PermitsConcurrent", testPermitsConcurrent},
		{"PermitBadInput", testPermitBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newEnv(t, newSubject))
		})
	}
}

// env is one subtest's Subject, a Limiter on it and a unique key prefix.
type env struct {
	Subject
	lim    *ratewarden.Limiter
	prefix string
}

func newEnv(t *testing.T, newSubject func(*testing.T) Subject) *env {
	t.Helper()
	s := newSubject(t)
	if s.Store == nil || s.Advance == nil {
		t.Fatal("storetest: newSubject returned a Subject without Store or Advance")
	}
	l, err := ratewarden.New(s.Store)
	if err != nil {
		t.Fatalf("ratewarden.New: %v", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &env{Subject: s, lim: l, prefix: t.Name() + "/" + hex.EncodeToString(b[:]) + "/"}
}

// key returns a key unique to this subtest.
func (e *env) key(name string) string { return e.prefix + name }

var ctx = context.Background()

func (e *env) allowN(t *testing.T, key string, l ratewarden.Limit, n int64) ratewarden.Result {
	t.Helper()
	r, err := e.lim.AllowN(ctx, key, l, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %v, %d): %v", key, l, n, err)
	}
	checkResult(t, r, l)
	return r
}

func (e *env) peek(t *testing.T, key string, l ratewarden.Limit) ratewarden.Result {
	t.Helper()
	r, err := e.lim.Peek(ctx, key, l)
	if err != nil {
		t.Fatalf("Peek(%q, %v): %v", key, l, err)
	}
	checkResult(t, r, l)
	return r
}

// checkResult asserts what holds for every Result.
func checkResult(t *testing.T, r ratewarden.Result, l ratewarden.Limit) {
	t.Helper()
	if r.Limit != l {
		t.Fatalf("Result.Limit = %v, want the checked limit %v", r.Limit, l)
	}
	// A healthy store decides exactly: from its shared state, or locally
	// from an exact cache of its denials or a lease of its capacity.
	switch {
	case r.Source.Degraded():
		t.Fatalf("Result.Source = %v: degraded, but the store is healthy", r.Source)
	case r.Source == ratewarden.SourceCache && r.Allowed:
		t.Fatalf("Result.Source = cache with Allowed: a deny cache may only deny")
	case r.Source > ratewarden.SourceLocalFallback:
		t.Fatalf("Result.Source = %v: unknown", r.Source)
	}
	if r.Remaining < 0 || r.Remaining > l.Capacity() {
		t.Fatalf("Remaining = %d, want within [0, %d]", r.Remaining, l.Capacity())
	}
	if r.Allowed && r.RetryAfter != 0 {
		t.Fatalf("allowed with RetryAfter = %v, want 0", r.RetryAfter)
	}
	if !r.Allowed && r.RetryAfter <= 0 {
		t.Fatalf("denied with RetryAfter = %v, want > 0", r.RetryAfter)
	}
	if r.ResetAfter < 0 {
		t.Fatalf("ResetAfter = %v, want >= 0", r.ResetAfter)
	}
}

func want(t *testing.T, what string, r ratewarden.Result, allowed bool, remaining int64) {
	t.Helper()
	if r.Allowed != allowed || r.Remaining != remaining {
		t.Fatalf("%s: Allowed=%v Remaining=%d, want Allowed=%v Remaining=%d (result %+v)",
			what, r.Allowed, r.Remaining, allowed, remaining, r)
	}
}

// stable returns a limit of alg with the given rate and a period of about
// an hour such that, on the store's clock, no window boundary falls in the
// next ten minutes: counting tests are then exact for every algorithm.
func (e *env) stable(t *testing.T, alg ratewarden.Algorithm, rate int64) ratewarden.Limit {
	t.Helper()
	for _, p := range []time.Duration{time.Hour, 61 * time.Minute, 59 * time.Minute, 67 * time.Minute, 71 * time.Minute, 73 * time.Minute} {
		if e.untilBoundary(t, p) > 10*time.Minute {
			return ratewarden.Limit{Algorithm: alg, Rate: rate, Period: p}
		}
	}
	t.Fatal("storetest: every candidate period has a window boundary within ten minutes; FixedWindow ResetAfter is wrong")
	return ratewarden.Limit{}
}

// untilBoundary asks the store how long until its current epoch-aligned
// window of period p ends, with a FixedWindow probe on a key of its own.
func (e *env) untilBoundary(t *testing.T, p time.Duration) time.Duration {
	t.Helper()
	d, _ := e.boundary(t, p)
	return d
}

// boundary is untilBoundary that also returns a local instant no later
// than that boundary: the store read its clock after the probe was sent.
func (e *env) boundary(t *testing.T, p time.Duration) (time.Duration, time.Time) {
	t.Helper()
	sent := time.Now()
	probe := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: p}
	r := e.allowN(t, e.key(fmt.Sprintf("probe-%v-%d", p, probeSeq.Add(1))), probe, 1)
	if !r.Allowed || r.ResetAfter <= 0 || r.ResetAfter > p {
		t.Fatalf("FixedWindow probe %v on a fresh key: %+v, want allowed with 0 < ResetAfter <= %v", probe, r, p)
	}
	return r.ResetAfter, sent.Add(r.ResetAfter)
}

var probeSeq atomic.Int64

// align advances the store's clock to just past the start of a window of
// period p, so that a test has almost a whole window before the next
// boundary. It returns a local instant no later than that window's end.
func (e *env) align(t *testing.T, p time.Duration) time.Time {
	t.Helper()
	d, at := e.boundary(t, p)
	e.Advance(d + margin)
	return at.Add(p)
}

// short returns a limit of alg with the given rate per period p, aligned
// to a fresh window (the test then has almost a whole period before the
// boundary), and a local instant until which calls are still in that
// window (far in the future for the algorithms without windows).
func (e *env) short(t *testing.T, alg ratewarden.Algorithm, rate int64, p time.Duration) (ratewarden.Limit, time.Time) {
	t.Helper()
	l := ratewarden.Limit{Algorithm: alg, Rate: rate, Period: p}
	if alg == ratewarden.FixedWindow || alg == ratewarden.SlidingWindow {
		return l, e.align(t, l.Period)
	}
	return l, time.Now().Add(time.Hour)
}

func testAdmitsCapacity(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 5)
	k := e.key("k")
	for i := range l.Rate {
		want(t, fmt.Sprintf("request %d", i+1), e.allowN(t, k, l, 1), true, l.Rate-i-1)
	}
	for i := range 3 {
		r := e.allowN(t, k, l, 1)
		want(t, fmt.Sprintf("request %d over", i+1), r, false, 0)
	}
	if alg == ratewarden.TokenBucket {
		// Burst is the bucket size: 8 now, while the refill stays 5 per period.
		b := l
		b.Burst = 8
		k2 := e.key("burst")
		for i := range b.Burst {
			want(t, fmt.Sprintf("burst request %d", i+1), e.allowN(t, k2, b, 1), true, b.Burst-i-1)
		}
		want(t, "burst request over", e.allowN(t, k2, b, 1), false, 0)
	}
}

// testRateChange: a key's state belongs to its scope (algorithm and
// period), not to its rate, so a limit whose rate changes finds what the
// old rate left. Windows and logs keep their counts, compared with the new
// rate; a token bucket keeps its TAT, read at the new rate.
func testRateChange(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 100)
	k := e.key("k")
	want(t, "AllowN(40) at 100", e.allowN(t, k, l, 40), true, 60)
	for _, tc := range []struct {
		rate       int64
		windowLeft int64 // rate − 40
		bucketLeft int64 // rate − ceil(0.4 × rate): the TAT is 0.4 periods away
	}{{200, 160, 120}, {50, 10, 30}, {100, 60, 60}} {
		l.Rate = tc.rate
		r := e.peek(t, k, l)
		switch alg {
		case ratewarden.TokenBucket:
			// Time passing since the charge frees a unit every P/rate (at
			// least 36s here): allow one.
			if !r.Allowed || r.Remaining < tc.bucketLeft || r.Remaining > tc.bucketLeft+1 {
				t.Fatalf("peek at rate %d: %+v, want Remaining %d (the TAT read at the new rate)", tc.rate, r, tc.bucketLeft)
			}
		default:
			want(t, fmt.Sprintf("peek at rate %d", tc.rate), r, true, tc.windowLeft)
		}
	}
}

func testDeniedConsumesNothing(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 10)
	k := e.key("k")
	want(t, "AllowN(8)", e.allowN(t, k, l, 8), true, 2)
	for range 5 {
		want(t, "AllowN(3) over", e.allowN(t, k, l, 3), false, 2)
	}
	want(t, "AllowN(2) after denials", e.allowN(t, k, l, 2), true, 0)
	want(t, "Allow when empty", e.allowN(t, k, l, 1), false, 0)
}

func testPeek(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 3)
	k := e.key("k")
	for range 5 {
		want(t, "Peek fresh", e.peek(t, k, l), true, 3)
	}
	want(t, "Allow", e.allowN(t, k, l, 1), true, 2)
	for range 3 {
		want(t, "Peek after one", e.peek(t, k, l), true, 2)
	}
	e.allowN(t, k, l, 2)
	r := e.peek(t, k, l)
	want(t, "Peek when empty", r, false, 0)
	if r.RetryAfter <= 0 || r.RetryAfter > 2*l.Period {
		t.Fatalf("Peek when empty: RetryAfter = %v, want in (0, %v]", r.RetryAfter, 2*l.Period)
	}
}

func testCostZero(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 4)
	k := e.key("k")
	r := e.allowN(t, k, l, 0)
	want(t, "AllowN(0) fresh", r, true, 4)
	if r.ResetAfter != 0 {
		t.Fatalf("AllowN(0) fresh: ResetAfter = %v, want 0 (full allowance)", r.ResetAfter)
	}
	want(t, "AllowN(0) again", e.allowN(t, k, l, 0), true, 4)
	want(t, "AllowN(4)", e.allowN(t, k, l, 4), true, 0)
	r = e.allowN(t, k, l, 0)
	want(t, "AllowN(0) when empty", r, true, 0)
	if r.ResetAfter <= 0 {
		t.Fatalf("AllowN(0) when empty: ResetAfter = %v, want > 0", r.ResetAfter)
	}
	want(t, "Allow when empty", e.allowN(t, k, l, 1), false, 0)
}

func testCostN(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 10)
	k := e.key("k")
	want(t, "AllowN(4)", e.allowN(t, k, l, 4), true, 6)
	want(t, "AllowN(4)", e.allowN(t, k, l, 4), true, 2)
	want(t, "AllowN(4) over", e.allowN(t, k, l, 4), false, 2)
	want(t, "AllowN(2)", e.allowN(t, k, l, 2), true, 0)
	k2 := e.key("full")
	want(t, "AllowN(capacity)", e.allowN(t, k2, l, l.Capacity()), true, 0)
	want(t, "Allow after capacity", e.allowN(t, k2, l, 1), false, 0)
	_, err := e.lim.AllowN(ctx, k2, l, l.Capacity()+1)
	if !errors.Is(err, ratewarden.ErrInvalidCost) {
		t.Fatalf("AllowN(capacity+1): err = %v, want ErrInvalidCost", err)
	}
}

func testRetryAfter(t *testing.T, e *env, alg ratewarden.Algorithm) {
	retryLate(t, shortPeriod, func(p time.Duration, attempt int) string {
		return checkRetryAfter(t, e, alg, p, attempt)
	})
}

func checkRetryAfter(t *testing.T, e *env, alg ratewarden.Algorithm, p time.Duration, attempt int) string {
	l, windowEnd := e.short(t, alg, 2, p)
	k := e.key(fmt.Sprintf("k%d", attempt))
	start := time.Now()
	e.allowN(t, k, l, 1)
	e.allowN(t, k, l, 1)
	r := e.allowN(t, k, l, 1)
	if r.Allowed {
		// Nothing comes back within a period / rate of the first call (a
		// token, a logged request), nor inside the aligned window.
		if s := late("the third call", start.Add(l.Period/time.Duration(l.Rate))); s != "" {
			return s
		}
		if s := late("the third call", windowEnd); s != "" {
			return s + " for its window"
		}
		t.Fatalf("third of %v allowed: %+v", l, r)
	}
	// A sliding window may need the rest of this window and part of the
	// next; the others at most one period.
	maxRetry := l.Period
	if alg == ratewarden.SlidingWindow {
		maxRetry = 2 * l.Period
	}
	if r.RetryAfter > maxRetry {
		t.Fatalf("RetryAfter = %v, want <= %v", r.RetryAfter, maxRetry)
	}
	e.Advance(r.RetryAfter + margin)
	if r := e.allowN(t, k, l, 1); !r.Allowed {
		t.Fatalf("denied after waiting RetryAfter: %+v", r)
	}
	return ""
}

// testResetAfter needs no timing: coming late only lets more of the
// allowance come back.
func testResetAfter(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l, _ := e.short(t, alg, 3, shortPeriod)
	k := e.key("k")
	r := e.allowN(t, k, l, 2)
	maxReset := l.Period
	if alg == ratewarden.SlidingWindow {
		maxReset = 2 * l.Period
	}
	if r.ResetAfter <= 0 || r.ResetAfter > maxReset {
		t.Fatalf("ResetAfter after consuming = %v, want in (0, %v]", r.ResetAfter, maxReset)
	}
	e.Advance(r.ResetAfter + margin)
	want(t, "Peek after ResetAfter", e.peek(t, k, l), true, l.Capacity())
	want(t, "AllowN(capacity) after ResetAfter", e.allowN(t, k, l, l.Capacity()), true, 0)
}

func testReset(t *testing.T, e *env, alg ratewarden.Algorithm) {
	a := e.stable(t, alg, 3)
	other := ratewarden.FixedWindow
	if alg == ratewarden.FixedWindow {
		other = ratewarden.SlidingLog
	}
	b := e.stable(t, other, 3)
	k1, k2 := e.key("k1"), e.key("k2")
	for _, k := range []string{k1, k2} {
		e.allowN(t, k, a, 2)
		e.allowN(t, k, b, 2)
	}
	if err := e.lim.Reset(ctx, k1, a); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	want(t, "k1 under the reset limit", e.peek(t, k1, a), true, 3)
	want(t, "k1 under the other limit", e.peek(t, k1, b), true, 1)
	want(t, "k2 under the reset limit", e.peek(t, k2, a), true, 1)
	want(t, "k2 under the other limit", e.peek(t, k2, b), true, 1)
	if err := e.lim.Reset(ctx, e.key("never-used"), a, b); err != nil {
		t.Fatalf("Reset of an unused key: %v", err)
	}
	if err := e.lim.Reset(ctx, k2, a, b); err != nil {
		t.Fatalf("Reset of two limits: %v", err)
	}
	want(t, "k2 after Reset of both, limit a", e.peek(t, k2, a), true, 3)
	want(t, "k2 after Reset of both, limit b", e.peek(t, k2, b), true, 3)
}

// otherAlg returns a limit of a different scope than a, with the given rate.
func (e *env) otherLimit(t *testing.T, a ratewarden.Limit, rate int64) ratewarden.Limit {
	t.Helper()
	alg := ratewarden.TokenBucket
	if a.Algorithm == alg {
		alg = ratewarden.FixedWindow
	}
	return e.stable(t, alg, rate)
}

func testMultiLimit(t *testing.T, e *env, alg ratewarden.Algorithm) {
	a := e.stable(t, alg, 5)
	b := e.otherLimit(t, a, 2)
	k := e.key("k")
	for i := range 2 {
		d, err := e.lim.AllowAll(ctx, k, 1, a, b)
		if err != nil {
			t.Fatalf("AllowAll: %v", err)
		}
		if !d.Allowed || len(d.Results) != 2 {
			t.Fatalf("AllowAll %d: %+v, want allowed with 2 results", i+1, d)
		}
		checkResult(t, d.Results[0], a)
		checkResult(t, d.Results[1], b)
		want(t, "AllowAll limit a", d.Results[0], true, a.Rate-int64(i)-1)
		want(t, "AllowAll limit b", d.Results[1], true, b.Rate-int64(i)-1)
	}
	for range 3 {
		d, err := e.lim.AllowAll(ctx, k, 1, a, b)
		if err != nil {
			t.Fatalf("AllowAll: %v", err)
		}
		if d.Allowed {
			t.Fatalf("AllowAll over b: %+v, want denied", d)
		}
		checkResult(t, d.Results[0], a)
		checkResult(t, d.Results[1], b)
		// a admits on its own but, as the whole is denied, reports its
		// remaining before (nothing consumed).
		want(t, "AllowAll limit a when b denies", d.Results[0], true, 3)
		want(t, "AllowAll limit b when b denies", d.Results[1], false, 0)
		if got := d.Binding(); got.Limit != b {
			t.Fatalf("Binding().Limit = %v, want the denying limit %v", got.Limit, b)
		}
	}
	want(t, "a after the denied checks", e.peek(t, k, a), true, 3)
	// Order does not matter, and a denial by the first limit consumes
	// nothing from the second either.
	k2 := e.key("k2")
	e.allowN(t, k2, b, 2)
	d, err := e.lim.AllowAll(ctx, k2, 1, b, a)
	if err != nil {
		t.Fatalf("AllowAll: %v", err)
	}
	if d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed {
		t.Fatalf("AllowAll(b, a) with b empty: %+v, want b denied, a allowing, whole denied", d)
	}
	want(t, "a after the denied check", e.peek(t, k2, a), true, a.Rate)
}

func testStorePeekMulti(t *testing.T, e *env, alg ratewarden.Algorithm) {
	a := e.stable(t, alg, 4)
	b := e.otherLimit(t, a, 6)
	k := e.key("k")
	res := make([]ratewarden.Result, 2)
	for _, req := range []ratewarden.Request{
		{Key: k, Limits: []ratewarden.Limit{a, b}, Cost: 3, Peek: true},
		{Key: k, Limits: []ratewarden.Limit{a, b}, Cost: 0},
	} {
		for range 3 {
			if err := e.Store.Check(ctx, &req, res); err != nil {
				t.Fatalf("Check(%+v): %v", req, err)
			}
			checkResult(t, res[0], a)
			checkResult(t, res[1], b)
			want(t, fmt.Sprintf("cost %d peek %v, limit a", req.Cost, req.Peek), res[0], true, 4)
			want(t, fmt.Sprintf("cost %d peek %v, limit b", req.Cost, req.Peek), res[1], true, 6)
		}
	}
	req := ratewarden.Request{Key: k, Limits: []ratewarden.Limit{a, b}, Cost: 3}
	if err := e.Store.Check(ctx, &req, res); err != nil {
		t.Fatalf("Check: %v", err)
	}
	want(t, "consuming check, limit a", res[0], true, 1)
	want(t, "consuming check, limit b", res[1], true, 3)
}

func testIndependentKeys(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 2)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = e.key(fmt.Sprintf("user-%d", i))
	}
	for i, k := range keys {
		e.allowN(t, k, l, int64(i%3))
	}
	for i, k := range keys {
		want(t, k, e.peek(t, k, l), i%3 < 2, l.Rate-int64(i%3))
	}
}

func testOddKeys(t *testing.T, e *env, alg ratewarden.Algorithm) {
	l := e.stable(t, alg, 1)
	// Long keys: beyond redisstore's MaxKeyLen (256, hashed there) and
	// within memstore's default key cap (1 KiB) with the prefix and a byte
	// more, so every store's default takes them.
	long := strings.Repeat("x", 900)
	odd := []string{
		"{", "}", "{}", "a{b}c", "{user}", "}{", "{{}}", "a}:" + l.Scope(), ":", "a:b",
		"\x00", "\x00\xff\xfe", "\xff", "héllo wörld ☃", "with space", "new\nline", "*", "?",
		long, long + "a", long + "b", "a" + long,
	}
	for _, k := range odd {
		full := e.key(k)
		want(t, fmt.Sprintf("first on %q", trunc(k)), e.allowN(t, full, l, 1), true, 0)
	}
	for _, k := range odd {
		full := e.key(k)
		want(t, fmt.Sprintf("peek on %q", trunc(k)), e.peek(t, full, l), false, 0)
		if err := e.lim.Reset(ctx, full, l); err != nil {
			t.Fatalf("Reset(%q): %v", trunc(k), err)
		}
	}
	for _, k := range odd {
		want(t, fmt.Sprintf("peek on %q after reset", trunc(k)), e.peek(t, e.key(k), l), true, 1)
	}
}

func trunc(s string) string {
	if len(s) > 20 {
		return fmt.Sprintf("%s…(%d bytes)", s[:20], len(s))
	}
	return s
}

func testConcurrent(t *testing.T, e *env, alg ratewarden.Algorithm) {
	const goroutines, calls = 16, 40
	l := e.stable(t, alg, 100)
	if alg == ratewarden.TokenBucket {
		// 100 per hour refills a token every 36 s: more than a slow storm
		// may take. A bucket of 100 that refills one token per hour admits
		// the same 100 whatever the storm's pace.
		l.Rate, l.Burst = 1, 100
	}
	k := e.key("hot")
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range calls {
				r, err := e.lim.Allow(ctx, k, l)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Allow: %v", err)
	}
	if got := admitted.Load(); got != l.Capacity() {
		t.Fatalf("%d goroutines × %d calls admitted %d, want exactly %d", goroutines, calls, got, l.Capacity())
	}
	want(t, "Peek after the storm", e.peek(t, k, l), false, 0)
}

func testFixedRollover(t *testing.T, e *env) {
	retryLate(t, shortPeriod, func(p time.Duration, attempt int) string {
		return checkFixedRollover(t, e, p, attempt)
	})
}

func checkFixedRollover(t *testing.T, e *env, p time.Duration, attempt int) string {
	l := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: p}
	windowEnd := e.align(t, l.Period)
	k := e.key(fmt.Sprintf("k%d", attempt))
	e.allowN(t, k, l, 2)
	r := e.allowN(t, k, l, 1)
	if r.Allowed {
		if s := late("the third call", windowEnd); s != "" {
			return s + " for its window"
		}
		t.Fatalf("third of %v allowed: %+v", l, r)
	}
	if r.RetryAfter != r.ResetAfter || r.RetryAfter > l.Period-margin {
		t.Fatalf("RetryAfter %v, ResetAfter %v: want both the time to the window end (< %v)", r.RetryAfter, r.ResetAfter, l.Period-margin)
	}
	// The window ends at the epoch-aligned boundary, not a period after the
	// first request: a new window starts with the full allowance.
	e.Advance(r.RetryAfter + margin)
	want(t, "first in the next window", e.allowN(t, k, l, 1), true, 1)
	return ""
}

func testSlidingDecay(t *testing.T, e *env) {
	retryLate(t, 4*shortPeriod, func(p time.Duration, attempt int) string {
		return checkSlidingDecay(t, e, p, attempt)
	})
}

func checkSlidingDecay(t *testing.T, e *env, p time.Duration, attempt int) string {
	l := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: p}
	windowEnd := e.align(t, l.Period)
	k := e.key(fmt.Sprintf("k%d", attempt))
	want(t, "fill the window", e.allowN(t, k, l, 10), true, 0)
	until, boundary := e.boundary(t, l.Period)
	if s := late("filling the window", windowEnd); s != "" {
		return s // the fill may have landed in the window after
	}
	// Half-way through the next window the previous window's 10 weigh
	// ceil(10 × 0.5) = 5: 5 remain. A store on real time is a little later,
	// when a little more has decayed; up to 7 while at most 70% of the
	// window went by (past that, the peek came too late to tell).
	e.Advance(until + l.Period/2)
	peeked := time.Now()
	r := e.peek(t, k, l)
	if !r.Allowed || r.Remaining < 5 || r.Remaining > 7 {
		if s := late("the half-way peek", boundary.Add(l.Period*7/10)); s != "" {
			return s
		}
		t.Fatalf("half-way through the next window: %+v, want 5 (up to 7 on a slow real clock) remaining", r)
	}
	// What decayed can be consumed; a unit decays every tenth of the
	// period, so at most one more may have decayed meanwhile if the call
	// comes within that time (and in the same window).
	if got := e.allowN(t, k, l, r.Remaining); !got.Allowed || got.Remaining > 1 {
		if s := late("consuming what decayed", peeked.Add(l.Period/10)); s != "" {
			return s
		}
		if s := late("consuming what decayed", boundary.Add(l.Period)); s != "" {
			return s + " for its window"
		}
		t.Fatalf("consuming the %d remaining: %+v, want allowed with 0 (at most 1) left", r.Remaining, got)
	}
	return ""
}
