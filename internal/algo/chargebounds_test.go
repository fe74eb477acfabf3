package algo

import (
	"testing"

	"github.com/ratewarden/ratewarden"
)

// The largest charges and refunds Store.Charge accepts (±MaxRate units) on
// the slowest and the fastest token buckets stay within 64-bit arithmetic
// and below 2^53: a charge stops at ChargeHorizon, a refund at a full
// bucket.
func TestChargeBucketExtremes(t *testing.T) {
	const now = int64(1_700_000_000_000_000)
	slow := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: ratewarden.MaxPeriod})
	fast := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: ratewarden.MaxRate, Period: ratewarden.MaxPeriod})
	for _, p := range []Params{slow, fast} {
		// A charge of MaxRate units: the slow bucket reaches the horizon
		// after 2 units (one unit is MaxPeriod), the fast one takes them
		// all (MaxRate units are one MaxPeriod).
		b, applied, changed, exp := ChargeBucket(Bucket{}, now, p, []Charged{{Units: ratewarden.MaxRate, At: now}})
		room, _ := MulDiv(ChargeHorizon, p.Rate, p.Period)
		want := min(int64(ratewarden.MaxRate), room)
		if !changed || applied != want || exp > now+ChargeHorizon || exp >= 1<<53 {
			t.Fatalf("%+v: charge of MaxRate: %+v applied %d changed %v expires %d; want %d applied, expiry within the horizon", p, b, applied, changed, exp, want)
		}
		// Another one on top adds nothing past the horizon.
		b2, applied2, _, exp2 := ChargeBucket(b, now, p, []Charged{{Units: ratewarden.MaxRate, At: now}})
		if p == slow && (applied2 != 0 || b2 != b || exp2 != exp) {
			t.Fatalf("%+v: charge at the horizon: %+v applied %d; want nothing more", p, b2, applied2)
		}
		// A refund of MaxRate units gives back what the bucket holds and
		// leaves it full.
		held := bucketUsed(b, now, p)
		b3, applied3, changed3, exp3 := ChargeBucket(b, now, p, []Charged{{Units: -ratewarden.MaxRate, At: now}})
		if !changed3 || b3 != (Bucket{T: now}) || applied3 != -held || exp3 != now {
			t.Fatalf("%+v: refund of MaxRate from %+v: %+v applied %d expires %d; want a full bucket, -%d applied", p, b, b3, applied3, exp3, held)
		}
	}
}

// A reservation's refund is taken back only when the TAT is within half
// an emission interval of the instant it names: on the fastest bucket of
// the longest period (31.6 µs intervals) a TAT 5 s away is not near,
// though (5 s × Rate) × 2 overflows int64.
func TestNearTATLargeProducts(t *testing.T) {
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: ratewarden.MaxRate, Period: ratewarden.MaxPeriod})
	const at = int64(1_700_000_000_000_000)
	for _, tc := range []struct {
		d    int64
		near bool
	}{{0, true}, {15, true}, {-15, true}, {16, false}, {-16, false}, {5_000_000, false}, {-5_000_000, false}, {p.Period, false}} {
		if got := nearTAT(Bucket{T: at + tc.d}, at, p); got != tc.near {
			t.Errorf("TAT %+d µs from the instant (interval %d/%d µs): near %v, want %v", tc.d, p.Period, p.Rate, got, tc.near)
		}
	}
	now := at - 1_000_000
	b := Bucket{T: at + 5_000_000}
	if got, applied, changed, _ := ChargeBucket(b, now, p, []Charged{{Units: -1, At: at}}); changed || applied != 0 || got != b {
		t.Errorf("refund of a reservation 5 s from the TAT: %+v applied %d changed %v; want nothing", got, applied, changed)
	}
}
