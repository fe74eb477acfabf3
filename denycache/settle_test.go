package denycache

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// Reservations, settlements and concurrency limits (issue 17) through the
// deny cache: only the store decides what a refund can change.

// request runs req through st and returns its results.
func request(t testing.TB, st ratewarden.Store, req ratewarden.Request) []ratewarden.Result {
	t.Helper()
	res := make([]ratewarden.Result, len(req.Limits))
	if err := st.Check(bg, &req, res); err != nil {
		t.Fatalf("check %+v: %v", req, err)
	}
	return res
}

func TestNotCacheableGoesToStore(t *testing.T) {
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Hour}
	for _, tc := range []struct {
		name string
		lim  ratewarden.Limit
		req  ratewarden.Request
	}{
		{"refundable", fw, ratewarden.Request{Cost: 1, Refundable: true}},
		{"refundable peek", fw, ratewarden.Request{Cost: 1, Refundable: true, Peek: true}},
		// A window ignores MaxDelay: the store denies, and the cache must
		// still not answer or remember it.
		{"reservation on a window", fw, ratewarden.Request{Cost: 1, MaxDelay: time.Second}},
		// A bucket out of tokens: the reservation is admitted ahead.
		{"reservation on a bucket", bucket, ratewarden.Request{Cost: 1, MaxDelay: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner, s := newMem(t)
				exhaust(t, s, "k", tc.lim)
				if r := check(t, s, "k", 1, false, tc.lim)[0]; r.Allowed || r.Source != ratewarden.SourceStore {
					t.Fatalf("denial = %+v, want the store's", r)
				}
				if n := s.Len(); n != 1 {
					t.Fatalf("Len = %d after a cacheable denial, want 1", n)
				}
				req := tc.req
				req.Key, req.Limits = "k", []ratewarden.Limit{tc.lim}
				before := inner.checks.Load()
				for i := range 3 {
					r := request(t, s, req)[0]
					if r.Source != ratewarden.SourceStore {
						t.Fatalf("%s %d = %+v, want the store's answer, not the cache's", tc.name, i, r)
					}
				}
				if n := inner.checks.Load() - before; n != 3 {
					t.Errorf("the store saw %d of 3 checks", n)
				}

				// Its denials are not remembered: after Reset nothing is.
				if err := s.Reset(bg, "k", tc.lim); err != nil {
					t.Fatal(err)
				}
				exhaust(t, s, "k", tc.lim)
				for range 2 {
					request(t, s, req)
				}
				if n := s.Len(); n != 0 {
					t.Errorf("Len = %d after non-cacheable checks only, want 0", n)
				}
			})
		})
	}
}

// blocking is a store whose checks of key "slow" wait for release.
type blocking struct {
	ratewarden.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if req.Key == "slow" && req.Cacheable() {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Store.Check(ctx, req, res)
}

// The gate holds back cacheable checks of a key at the edge of its limit
// while one is in flight; a reservation or refundable check passes it: no
// answer of another check could be used for it.
func TestGateLetsNotCacheablePass(t *testing.T) {
	m, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := &blocking{Store: m, entered: make(chan struct{}), release: make(chan struct{})}
	s, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		res := make([]ratewarden.Result, 1)
		first <- s.Check(bg, &ratewarden.Request{Key: "slow", Limits: []ratewarden.Limit{fw}, Cost: 1}, res)
	}()
	<-b.entered // a cacheable check of "slow" is in flight: the gate is closed

	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	for _, req := range []ratewarden.Request{
		{Key: "slow", Limits: []ratewarden.Limit{fw}, Cost: 1, Refundable: true},
		{Key: "slow", Limits: []ratewarden.Limit{fw}, Cost: 1, MaxDelay: time.Second},
	} {
		res := make([]ratewarden.Result, 1)
		if err := s.Check(ctx, &req, res); err != nil {
			t.Errorf("%+v held back by the gate: %v", req, err)
		} else if !res[0].Allowed || res[0].Source != ratewarden.SourceStore {
			t.Errorf("%+v = %+v, want the store's admission", req, res[0])
		}
	}
	close(b.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

func TestRefundForgetsDenials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, s := newMem(t)
		other := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1, Period: time.Hour}
		exhaust(t, s, "k", fw)
		exhaust(t, s, "k", other)
		check(t, s, "k", 1, false, fw)
		check(t, s, "k", 1, false, other)

		// A charge only consumes: the denials stay, and answer.
		applied := make([]int64, 1)
		if err := s.Charge(bg, "k", []ratewarden.Limit{fw}, []ratewarden.Spent{{Units: 1}}, applied); err != nil {
			t.Fatal(err)
		}
		if applied[0] != 1 {
			t.Errorf("charge applied %d, want 1", applied[0])
		}
		if r := check(t, s, "k", 1, false, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("after a charge = %+v, want the cached denial", r)
		}

		// A refund of 2 (the charge's unit and one more) frees one unit.
		if err := s.Charge(bg, "k", []ratewarden.Limit{fw}, []ratewarden.Spent{{Units: -2}}, applied); err != nil {
			t.Fatal(err)
		}
		if applied[0] != -2 {
			t.Errorf("refund applied %d, want -2", applied[0])
		}
		before := inner.checks.Load()
		if r := check(t, s, "k", 1, false, fw)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("after a refund = %+v, want the store's admission", r)
		}
		if n := inner.checks.Load() - before; n != 1 {
			t.Errorf("the store saw %d checks, want 1", n)
		}
		// The other limit's denial was not the refund's business.
		if r := check(t, s, "k", 1, false, other)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("other limit = %+v, want its cached denial", r)
		}
	})
}

// takesNothing fails every charge.
type takesNothing struct{ ratewarden.Store }

func (takesNothing) Charge(context.Context, string, []ratewarden.Limit, []ratewarden.Spent, []int64) error {
	return ratewarden.ErrStoreUnavailable
}

// A refund whose fate is unknown (the store failed) forgets the denials
// too: forgetting only costs a store call.
func TestFailedRefundForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s, err := New(takesNothing{m})
		if err != nil {
			t.Fatal(err)
		}
		exhaust(t, s, "k", fw)
		check(t, s, "k", 1, false, fw)
		if n := s.Len(); n != 1 {
			t.Fatalf("Len = %d, want 1", n)
		}
		if err := s.Charge(bg, "k", []ratewarden.Limit{fw}, []ratewarden.Spent{{Units: -1}}, nil); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Fatalf("Charge = %v, want the store's error", err)
		}
		if r := check(t, s, "k", 1, false, fw)[0]; r.Source != ratewarden.SourceStore {
			t.Errorf("after a failed refund = %+v, want the store's answer", r)
		}
	})
}

// Concurrency limits pass through and are never cached: a denied Acquire
// is asked again, and a release is seen at once.
func TestPermitsPassThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s, err := New(m)
		if err != nil {
			t.Fatal(err)
		}
		ps := m // what the deny cache must agree with
		if pr, err := s.Acquire(bg, "k", "a", 1, time.Minute); err != nil || !pr.Acquired || pr.Held != 1 {
			t.Fatalf("Acquire a = %+v, %v; want acquired, 1 held", pr, err)
		}
		for range 2 {
			if pr, err := s.Acquire(bg, "k", "b", 1, time.Minute); err != nil || pr.Acquired || pr.RetryAfter <= 0 {
				t.Fatalf("Acquire b = %+v, %v; want refused with a RetryAfter", pr, err)
			}
		}
		if ok, err := s.Extend(bg, "k", "a", 2*time.Minute); err != nil || !ok {
			t.Fatalf("Extend a = %v, %v", ok, err)
		}
		if ok, err := s.Release(bg, "k", "a"); err != nil || !ok {
			t.Fatalf("Release a = %v, %v", ok, err)
		}
		if pr, err := s.Acquire(bg, "k", "b", 1, time.Minute); err != nil || !pr.Acquired {
			t.Fatalf("Acquire b after the release = %+v, %v; want acquired", pr, err)
		}
		if ok, err := ps.Release(bg, "k", "b"); err != nil || !ok {
			t.Errorf("b is not held in the inner store: %v, %v", ok, err)
		}
		if n := s.Len(); n != 0 {
			t.Errorf("Len = %d, want 0: permits are never cached", n)
		}
	})
}

// TestSameDecisionsWithSettlements is TestSameDecisionsAsStore with
// reservations (MaxDelay), refundable checks, and charges and refunds made
// through the cache: a refund through this replica must never leave a
// denial the store would not give.
func TestSameDecisionsWithSettlements(t *testing.T) {
	limits := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: ratewarden.SlidingWindow, Rate: 7, Period: 2 * time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Second, Burst: 6},
		{Algorithm: ratewarden.SlidingLog, Rate: 4, Period: 1500 * time.Millisecond},
	}
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range uint64(seeds) {
		synctest.Test(t, func(t *testing.T) { sameWithSettlements(t, seed, 3000, limits) })
	}
}

func sameWithSettlements(t *testing.T, seed uint64, steps int, limits []ratewarden.Limit) {
	rng := rand.New(rand.NewPCG(seed, 17))
	ref, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	inner, s := newMem(t, WithMaxEntries(1+rng.IntN(8)))
	refC, innerC := ref, s
	keys := []string{"a", "b"}
	cached, refunds := 0, 0
	for step := range steps {
		key, lim := keys[rng.IntN(len(keys))], limits[rng.IntN(len(limits))]
		switch x := rng.IntN(100); {
		case x < 20:
			time.Sleep(time.Duration(rng.Int64N(300)) * time.Millisecond)
			continue
		case x < 35:
			units := rng.Int64N(lim.Capacity()) + 1
			if rng.IntN(2) == 0 {
				units, refunds = -units, refunds+1
			}
			spent := []ratewarden.Spent{{Units: units, Ago: time.Duration(rng.Int64N(int64(lim.Period)))}}
			want, got := make([]int64, 1), make([]int64, 1)
			if err := refC.Charge(bg, key, []ratewarden.Limit{lim}, spent, want); err != nil {
				t.Fatal(err)
			}
			if err := innerC.Charge(bg, key, []ratewarden.Limit{lim}, spent, got); err != nil {
				t.Fatal(err)
			}
			if want[0] != got[0] {
				t.Fatalf("seed %d step %d: charge %+v applied %d in the store, %d through the cache", seed, step, spent, want[0], got[0])
			}
			continue
		}
		req := ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: min(1, lim.Capacity())}
		switch rng.IntN(4) {
		case 0:
			req.Refundable = true
		case 1:
			req.MaxDelay = time.Duration(rng.Int64N(int64(lim.Period)))
		}
		want := request(t, ref, req)[0]
		got := request(t, s, req)[0]
		if got.Source == ratewarden.SourceCache {
			cached++
			if !req.Cacheable() {
				t.Fatalf("seed %d step %d: %+v answered from the cache: %+v", seed, step, req, got)
			}
			if want.Allowed || got.RetryAfter > want.RetryAfter {
				t.Fatalf("seed %d step %d: %+v: cached %+v, store %+v", seed, step, req, got, want)
			}
			continue
		}
		if got != want {
			t.Fatalf("seed %d step %d: %+v: store %+v, through the cache %+v", seed, step, req, want, got)
		}
	}
	if cached == 0 || refunds == 0 || inner.checks.Load() >= int64(steps) {
		t.Fatalf("seed %d: %d cached denials, %d refunds, %d inner checks: the run tested nothing", seed, cached, refunds, inner.checks.Load())
	}
}
