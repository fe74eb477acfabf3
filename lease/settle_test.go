package lease

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// Reservations, settlements and concurrency limits (issue 17) through a
// lease Store: Redis decides them all, leases never.

// request runs req through st and fails the test on error.
func request(tb testing.TB, st ratewarden.Store, req ratewarden.Request) ratewarden.Result {
	tb.Helper()
	res := make([]ratewarden.Result, len(req.Limits))
	if err := st.Check(bg, &req, res); err != nil {
		tb.Fatalf("check %+v: %v", req, err)
	}
	return res[0]
}

func TestLeaseBypassedByRefundableChecks(t *testing.T) {
	srv := testredis.Start(t)
	plain, l := openLease(t, srv.Addr, WithSize(4))
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
	key := plain.Key("k", lim)
	warm(t, l)
	if r := check(t, l, "k", 1, false, lim)[0]; !r.Allowed {
		t.Fatalf("first check = %+v", r)
	}
	if n := windowCount(t, srv, key); n != 4 {
		t.Fatalf("count after a lease of 4 = %d", n)
	}

	before := scriptCalls(t, srv)
	for i := range 2 {
		r := request(t, l, ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{lim}, Cost: 1, Refundable: true})
		if !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("refundable check %d = %+v, want Redis' admission", i, r)
		}
	}
	if n := scriptCalls(t, srv) - before; n != 2 {
		t.Errorf("%d script calls for 2 refundable checks, want 2", n)
	}
	if n := windowCount(t, srv, key); n != 6 {
		t.Errorf("count = %d, want 6: the lease's 4 and the 2 refundable checks", n)
	}
	// The lease is untouched: its 3 units are still used locally.
	before = scriptCalls(t, srv)
	for i := range 3 {
		if r := check(t, l, "k", 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceLease {
			t.Errorf("leased check %d = %+v, want a local admission", i, r)
		}
	}
	if n := scriptCalls(t, srv) - before; n != 0 {
		t.Errorf("%d script calls for leased checks, want 0", n)
	}
}

// A reservation (Limiter.Wait on a token bucket) goes to Redis and is
// queued behind the units this replica leased.
func TestLeaseBypassedByReservations(t *testing.T) {
	srv := testredis.Start(t)
	_, l := openLease(t, srv.Addr, WithSize(5))
	// One unit per 6s, burst 10: no unit comes back between the first
	// check and the reservation unless 6s pass between them, so a busy
	// machine still finds the bucket empty.
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Minute}
	interval := bucket.Period / time.Duration(bucket.Rate)
	warm(t, l)
	for i := range 10 { // the lease takes 5 at a time; 10 empty the bucket
		if r := check(t, l, "k", 1, false, bucket)[0]; !r.Allowed {
			t.Fatalf("check %d = %+v", i, r)
		}
	}
	before := scriptCalls(t, srv)
	r := request(t, l, ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{bucket}, Cost: 1, MaxDelay: 10 * time.Second})
	if !r.Allowed || r.Source != ratewarden.SourceStore || r.Delay <= 0 || r.Delay > interval {
		t.Errorf("reservation = %+v, want Redis' admission ahead by at most one emission interval (%v)", r, interval)
	}
	if n := scriptCalls(t, srv) - before; n != 1 {
		t.Errorf("%d script calls for a reservation, want 1", n)
	}
}

func TestLeaseRefundForgetsDenial(t *testing.T) {
	srv := testredis.Start(t)
	plain, l := openLease(t, srv.Addr, WithSize(3))
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Hour}
	key := plain.Key("k", lim)
	warm(t, l)
	for i := range 3 {
		if r := check(t, l, "k", 1, false, lim)[0]; !r.Allowed {
			t.Fatalf("check %d = %+v", i, r)
		}
	}
	if r := check(t, l, "k", 1, false, lim)[0]; r.Allowed || r.Source != ratewarden.SourceStore {
		t.Fatalf("4th check = %+v, want Redis' denial", r)
	}
	if r := check(t, l, "k", 1, false, lim)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
		t.Fatalf("5th check = %+v, want the remembered denial", r)
	}

	// A charge only consumes: the denial stays.
	applied := make([]int64, 1)
	if err := l.Charge(bg, "k", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: 1}}, applied); err != nil {
		t.Fatal(err)
	}
	if r := check(t, l, "k", 1, false, lim)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
		t.Errorf("after a charge = %+v, want the remembered denial", r)
	}
	// A refund of 2 frees one unit: the next check asks Redis and gets it.
	if err := l.Charge(bg, "k", []ratewarden.Limit{lim}, []ratewarden.Spent{{Units: -2}}, applied); err != nil {
		t.Fatal(err)
	}
	if applied[0] != -2 {
		t.Errorf("refund applied %d, want -2", applied[0])
	}
	if n := windowCount(t, srv, key); n != 2 {
		t.Errorf("count after the refund = %d, want 2", n)
	}
	before := scriptCalls(t, srv)
	if r := check(t, l, "k", 1, false, lim)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
		t.Errorf("after the refund = %+v, want Redis' admission", r)
	}
	if n := scriptCalls(t, srv) - before; n != 1 {
		t.Errorf("%d script calls for the check after the refund, want 1", n)
	}
}

// Reserve and Settle through a Limiter on a lease Store: the count in
// Redis is the lease plus the actual cost, exactly.
func TestLeaseReserveSettle(t *testing.T) {
	srv := testredis.Start(t)
	plain, l := openLease(t, srv.Addr, WithSize(4))
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}
	key := plain.Key("k", lim)
	lm, err := ratewarden.New(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.Allow(bg, "k", lim); err != nil { // leases 4
		t.Fatal(err)
	}
	rv, err := lm.Reserve(bg, "k", 50, lim)
	if err != nil || !rv.Allowed || rv.Results[0].Source != ratewarden.SourceStore {
		t.Fatalf("Reserve = %+v, %v; want Redis' admission", rv, err)
	}
	if n := windowCount(t, srv, key); n != 54 {
		t.Fatalf("count after reserving 50 = %d, want 54", n)
	}
	st, err := rv.Settle(bg, 20)
	if err != nil || st.Delta != -30 || len(st.Applied) != 1 || st.Applied[0] != -30 {
		t.Fatalf("Settle(20) = %+v, %v; want 30 given back", st, err)
	}
	if n := windowCount(t, srv, key); n != 24 {
		t.Errorf("count after settling 20 = %d, want 24 (the lease's 4 and 20)", n)
	}
}

func TestLeasePermits(t *testing.T) {
	srv := testredis.Start(t)
	plain, l := openLease(t, srv.Addr)
	pk := plain.PermitKey("jobs")
	if pr, err := l.Acquire(bg, "jobs", "a", 1, time.Minute); err != nil || !pr.Acquired || pr.Held != 1 || pr.Source != ratewarden.SourceStore {
		t.Fatalf("Acquire a = %+v, %v", pr, err)
	}
	if n := do(t, srv, "ZCARD", pk); n != "1" {
		t.Fatalf("ZCARD %s = %s, want 1", pk, n)
	}
	// The expiry instant, in µs, is rounded up to Redis' milliseconds.
	if ms, _ := strconv.ParseInt(do(t, srv, "PTTL", pk), 10, 64); ms <= 0 || ms > time.Minute.Milliseconds()+1 {
		t.Errorf("PTTL = %d ms, want in (0, 1m + 1ms]", ms)
	}
	if pr, err := l.Acquire(bg, "jobs", "b", 1, time.Minute); err != nil || pr.Acquired || pr.RetryAfter <= 0 {
		t.Fatalf("Acquire b = %+v, %v; want refused", pr, err)
	}
	if ok, err := l.Extend(bg, "jobs", "a", 2*time.Minute); err != nil || !ok {
		t.Errorf("Extend a = %v, %v", ok, err)
	}
	if ok, err := l.Release(bg, "jobs", "a"); err != nil || !ok {
		t.Errorf("Release a = %v, %v", ok, err)
	}
	if ok, err := l.Release(bg, "jobs", "a"); err != nil || ok {
		t.Errorf("second Release a = %v, %v; want false", ok, err)
	}
	if n := do(t, srv, "EXISTS", pk); n != "0" {
		t.Errorf("EXISTS %s = %s after the last release, want 0", pk, n)
	}
	if n := l.Leases(); n != 0 {
		t.Errorf("Leases = %d, want 0: permits are never leased", n)
	}
}
