package algo

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// TestExactLargeProducts: the two reproductions where float64 arithmetic
// (products beyond 2^53) let a request through that the exact arithmetic
// rejects.
func TestExactLargeProducts(t *testing.T) {
	day := 24 * time.Hour
	t.Run("sliding_window 1000000/24h", func(t *testing.T) {
		p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1_000_000, Period: day})
		const t1, t2 = 1_700_854_254_501_380, 1_700_873_387_442_163
		s, o := SlidingWindow(Window{}, t1, p, 650_319, true)
		if !o.Allowed {
			t.Fatalf("first AllowN(650319): %+v", o)
		}
		// At t2 the previous window's 650,319 weigh exactly
		// 650,319 × (P − e) / P = 627,833.0...; rounded up: 627,834.
		_, o = SlidingWindow(s, t2, p, 372_167, true)
		if o.Allowed || o.Remaining != 372_166 {
			t.Fatalf("AllowN(372167) at t2: %+v; want denied with Remaining 372166", o)
		}
	})
	t.Run("token_bucket 999983/24h", func(t *testing.T) {
		p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 999_983, Period: day})
		s, o := TokenBucket(Bucket{}, t0, p, 999_983, true)
		if !o.Allowed {
			t.Fatalf("burst: %+v", o)
		}
		// 6,914,882,353 µs refill 80,031.99999999999 units: 80,031 fit.
		_, o = TokenBucket(s, t0+6_914_882_353, p, 80_032, true)
		if o.Allowed || o.Remaining != 80_031 {
			t.Fatalf("AllowN(80032): %+v; want denied with Remaining 80031", o)
		}
	})
}

// TestTokenBucketBurstAtOneInstant: a full bucket admits Capacity units at
// one instant whatever the split into requests (no per-request rounding of
// the emission interval).
func TestTokenBucketBurstAtOneInstant(t *testing.T) {
	for _, l := range []ratewarden.Limit{
		{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: time.Minute},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: time.Second, Burst: 14},
		{Algorithm: ratewarden.TokenBucket, Rate: 999_983, Period: 24 * time.Hour, Burst: 1000},
	} {
		p := FromLimit(l)
		var s Bucket
		for i := range p.Capacity {
			var o Outcome
			s, o = TokenBucket(s, t0, p, 1, true)
			if !o.Allowed || o.Remaining != p.Capacity-i-1 {
				t.Fatalf("%v: AllowN(1) #%d at one instant: %+v", l, i+1, o)
			}
		}
		if _, o := TokenBucket(s, t0, p, 1, true); o.Allowed {
			t.Fatalf("%v: admitted beyond the burst of %d", l, p.Capacity)
		}
	}
}

// TestTokenBucketSustainedRate: at 990,000/s with cost-1 requests on a
// clock that steps 1 µs, the bucket admits the configured rate: after the
// initial burst, exactly as many units per second as the rate (not 500,000
// as the per-request round-up of 1.0101 µs to 2 µs gave).
func TestTokenBucketSustainedRate(t *testing.T) {
	const rate = 990_000
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: rate, Period: time.Second})
	var s Bucket
	var o Outcome
	s, o = TokenBucket(s, t0, p, p.Capacity, true) // drain the burst
	if !o.Allowed {
		t.Fatal(o)
	}
	admitted := 0
	for now := t0 + 1; now <= t0+sec; now++ {
		for range 3 { // at most 1 unit refills per µs at this rate
			if s, o = TokenBucket(s, now, p, 1, true); !o.Allowed {
				break
			}
			admitted++
		}
	}
	if admitted < rate-1 || admitted > rate {
		t.Fatalf("admitted %d in the second after the burst, want %d (the rate)", admitted, rate)
	}
}
