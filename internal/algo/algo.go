// Package algo holds the four rate-limiting algorithms as pure functions:
// (state, now, limit, cost) -> (new state, outcome). No I/O, no clock.
//
// It is the specification the Redis Lua scripts mirror operation for
// operation; a differential test checks they agree. All instants and
// durations are integer microseconds (now is microseconds since the Unix
// epoch, as Redis TIME gives it), and all arithmetic is exact integer
// arithmetic: where a product can exceed 2^53 (prev × elapsed, n × Period,
// diff × Rate at large rates and long periods) it goes through MulDiv, a
// 128-bit multiply and divide, which the scripts compute exactly in their
// doubles too. No float rounding decides a result.
//
// Each function evaluates with consume false (the verdict for n, nothing
// changed: used for Peek and for all-or-nothing multi-limit checks) or true
// (consume n when allowed). It returns the state to store, which equals the
// input state unless something was consumed.
package algo

import (
	"math/bits"
	"time"

	"github.com/ratewarden/ratewarden"
)

// MulDiv returns q and r with a·b = q·c + r and 0 <= r < c, computed
// exactly. It requires a, b >= 0, c > 0 and a quotient below 2^63 (callers
// keep it below 2^53, where the scripts' doubles are exact).
func MulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi == 0 { // the common case: a 64-bit division is cheaper
		return int64(lo / uint64(c)), int64(lo % uint64(c))
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	return int64(uq), int64(ur)
}

// Params is a validated ratewarden.Limit in microseconds.
type Params struct {
	Alg      ratewarden.Algorithm
	Rate     int64
	Period   int64 // µs
	Capacity int64 // Burst for TokenBucket (Rate when Burst is 0), else Rate
}

// FromLimit converts a valid limit.
func FromLimit(l ratewarden.Limit) Params {
	return Params{Alg: l.Algorithm, Rate: l.Rate, Period: l.Period.Microseconds(), Capacity: l.Capacity()}
}

// Outcome is one limit's verdict. Remaining is after the consumption when
// something was consumed, before it otherwise.
type Outcome struct {
	Allowed    bool
	Remaining  int64
	RetryAfter int64 // µs; 0 when allowed
	ResetAfter int64 // µs until the full allowance is back
	// ExpireAt is the instant (µs) after which the returned state is
	// equivalent to no state: the TTL to set when storing it.
	ExpireAt int64
	// Wrote reports that the state changed and must be stored.
	Wrote bool
	// Delay is the wait (µs) of a reservation admitted ahead of time
	// (TokenBucketReserve); 0 otherwise.
	Delay int64
}

// Window is the state of FixedWindow and SlidingWindow: the start of the
// current window, its count, and (SlidingWindow) the previous window's count.
type Window struct {
	Start, Curr, Prev int64
}

// FixedWindow counts units in epoch-aligned windows [k·P, (k+1)·P).
func FixedWindow(s Window, now int64, p Params, n int64, consume bool) (Window, Outcome) {
	var o Outcome
	s = FixedWindowInto(&o, s, now, p, n, consume)
	return s, o
}

// FixedWindowInto is FixedWindow with the outcome written to *o (all of it),
// which spares a caller on a hot path the copies of a returned Outcome.
func FixedWindowInto(o *Outcome, s Window, now int64, p Params, n int64, consume bool) Window {
	ws := now - now%p.Period
	end := ws + p.Period
	var count int64
	if s.Start == ws {
		count = s.Curr
	}
	rem := max(p.Rate-count, 0)
	*o = Outcome{}
	o.ExpireAt = end
	if n <= rem {
		o.Allowed = true
		if consume && n > 0 {
			count += n
			rem -= n
			s = Window{Start: ws, Curr: count}
			o.Wrote = true
		}
	} else {
		o.RetryAfter = end - now
	}
	o.Remaining = rem
	if count > 0 {
		o.ResetAfter = end - now
	}
	return s
}

// slidingWeighted is the previous window's count weighted by the share of
// the sliding window it still covers, rounded up (conservative):
// ceil(prev × (period − elapsed) / period).
func slidingWeighted(prev, period, elapsed int64) int64 {
	q, r := MulDiv(prev, period-elapsed, period)
	if r > 0 {
		q++
	}
	return q
}

// slidingFirst returns the smallest elapsed time e in [0, period] at which
// slidingWeighted(prev, period, e) <= budget (budget >= 0, prev > 0):
// prev × (period − e) <= budget × period, so e = period − floor(budget ×
// period / prev).
func slidingFirst(prev, period, budget int64) int64 {
	if budget >= prev {
		return 0
	}
	q, _ := MulDiv(budget, period, prev)
	return period - q
}

// SlidingWindow estimates the count over the last Period as
// curr + ceil(prev × (P − elapsed) / P), where elapsed is the time since the
// current fixed window began.
func SlidingWindow(s Window, now int64, p Params, n int64, consume bool) (Window, Outcome) {
	var o Outcome
	s = SlidingWindowInto(&o, s, now, p, n, consume)
	return s, o
}

// SlidingWindowInto is SlidingWindow with the outcome written to *o (all of it),
// which spares a caller on a hot path the copies of a returned Outcome.
func SlidingWindowInto(o *Outcome, s Window, now int64, p Params, n int64, consume bool) Window {
	P := p.Period
	ws := now - now%P
	var curr, prev int64
	switch s.Start {
	case ws:
		curr, prev = s.Curr, s.Prev
	case ws - P:
		prev = s.Curr
	}
	elapsed := now - ws
	weighted := slidingWeighted(prev, P, elapsed)
	rem := max(p.Rate-curr-weighted, 0)
	*o = Outcome{}
	o.ExpireAt = ws + 2*P
	if n <= rem {
		o.Allowed = true
		if consume && n > 0 {
			curr += n
			rem -= n
			s = Window{Start: ws, Curr: curr, Prev: prev}
			o.Wrote = true
		}
	} else if budget := p.Rate - curr - n; budget >= 0 {
		// Admissible later in this window, once prev's weight has decayed.
		o.RetryAfter = slidingFirst(prev, P, budget) - elapsed
	} else {
		// Only in the next window, where curr becomes the previous count.
		o.RetryAfter = P - elapsed
		if b := p.Rate - n; curr > b {
			o.RetryAfter += slidingFirst(curr, P, b)
		}
	}
	o.Remaining = rem
	switch {
	case curr > 0:
		o.ResetAfter = ws + 2*P - now
	case weighted > 0:
		o.ResetAfter = ws + P - now
	}
	return s
}

// Bucket is the state of TokenBucket: the theoretical arrival time (TAT)
// T + F/Rate µs, with 0 <= F < Rate. Keeping the fraction makes every unit
// move the TAT by exactly Period/Rate, so no rounding is lost per request
// however the cost is split. The zero Bucket is a full bucket.
type Bucket struct {
	T, F int64
}

// bucketUsed is the number of units the bucket t holds at now (t.T >= now),
// rounded up: ceil(((t.T − now) × Rate + t.F) / Period).
func bucketUsed(t Bucket, now int64, p Params) int64 {
	q, r := MulDiv(t.T-now, p.Rate, p.Period)
	r += t.F // < 2 × Period, as F < Rate <= Period
	if r >= p.Period {
		q, r = q+1, r-p.Period
	}
	if r > 0 {
		q++
	}
	return q
}

// bucketAdvance moves the TAT of t by n emission intervals (n × Period/Rate).
func bucketAdvance(t Bucket, n int64, p Params) Bucket {
	q, r := MulDiv(n, p.Period, p.Rate)
	t.F += r
	if t.F >= p.Rate {
		q, t.F = q+1, t.F-p.Rate
	}
	t.T += q
	return t
}

// bucketRetry is the smallest delay r >= 1 (µs) after which n units fit
// in the bucket t (t.T >= now): the TAT must come within (Capacity − n)
// emission intervals of now + r, so r = (t.T − now) − floor(((Capacity − n)
// × Period − t.F) / Rate).
func bucketRetry(t Bucket, now int64, p Params, n int64) int64 {
	q, r := MulDiv(p.Capacity-n, p.Period, p.Rate)
	if r < t.F {
		q--
	}
	return max(t.T-now-q, 1)
}

// ceilTAT is the TAT of t rounded up to a whole microsecond.
func ceilTAT(t Bucket) int64 {
	if t.F > 0 {
		return t.T + 1
	}
	return t.T
}

// bucketAt is the stored TAT s as it reads at now: a fraction stored
// under a larger rate (the scope does not include it) rounds the TAT up to
// the next µs rather than being reinterpreted, and a TAT in the past is a
// full bucket, now.
func bucketAt(s Bucket, now int64, p Params) Bucket {
	if s.F >= p.Rate {
		s = Bucket{T: s.T + 1}
	}
	if s.T < now {
		s = Bucket{T: now}
	}
	return s
}

// TokenBucket is GCRA: each unit moves the TAT one emission interval
// Period/Rate later, and a request of n units fits while the units the
// TAT stands for (its distance from now, in intervals) leave room for n of
// the Capacity. A TAT in the past is the same as a full bucket.
func TokenBucket(s Bucket, now int64, p Params, n int64, consume bool) (Bucket, Outcome) {
	var o Outcome
	s = TokenBucketInto(&o, s, now, p, n, consume)
	return s, o
}

// TokenBucketInto is TokenBucket with the outcome written to *o (all of it),
// which spares a caller on a hot path the copies of a returned Outcome.
func TokenBucketInto(o *Outcome, s Bucket, now int64, p Params, n int64, consume bool) Bucket {
	t := bucketAt(s, now, p)
	rem := max(p.Capacity-bucketUsed(t, now, p), 0)
	*o = Outcome{}
	if n <= rem {
		o.Allowed = true
		if consume && n > 0 {
			t = bucketAdvance(t, n, p)
			s = t
			// bucketUsed(t, now, p) would be the old count + n exactly:
			// the TAT moved by n whole intervals, its numerator by
			// n × Period. So rem (at least n here) drops by n. The
			// script evaluates the new TAT again; the differential
			// tests hold the two equal.
			rem -= n
			o.Wrote = true
		}
	} else {
		o.RetryAfter = bucketRetry(t, now, p, n)
	}
	o.Remaining = rem
	o.ExpireAt = ceilTAT(t)
	o.ResetAfter = o.ExpireAt - now
	return s
}

// Log is the state of SlidingLog: the timestamps (µs) of admitted units,
// oldest first, one entry per unit. Entries at or before now − Period are
// stale and dropped on the next evaluation.
type Log []int64

// SlidingLog admits n while fewer than Rate − n + 1 units were admitted in
// (now − Period, now]. It may reuse the backing array of s.
func SlidingLog(s Log, now int64, p Params, n int64, consume bool) (Log, Outcome) {
	var o Outcome
	s = SlidingLogInto(&o, s, now, p, n, consume)
	return s, o
}

// SlidingLogInto is SlidingLog with the outcome written to *o (all of it),
// which spares a caller on a hot path the copies of a returned Outcome.
func SlidingLogInto(o *Outcome, s Log, now int64, p Params, n int64, consume bool) Log {
	cut := now - p.Period
	i := 0
	for i < len(s) && s[i] <= cut {
		i++
	}
	live := s[i:]
	count := int64(len(live))
	rem := max(p.Rate-count, 0)
	*o = Outcome{}
	if n <= rem {
		o.Allowed = true
		if consume && n > 0 {
			if i > 0 { // compact in place so the array does not creep forward
				live = s[:copy(s, live)]
			}
			for range n {
				live = append(live, now)
			}
			rem -= n
			s = live
			o.Wrote = true
		}
	} else {
		// The oldest count+n−Rate units must leave the window first.
		k := count + n - p.Rate
		o.RetryAfter = live[k-1] + p.Period - now
	}
	o.Remaining = rem
	if o.Wrote {
		live = s
	}
	if len(live) > 0 {
		o.ResetAfter = live[len(live)-1] + p.Period - now
		o.ExpireAt = live[len(live)-1] + p.Period
	}
	return s
}

// TokenBucketReserve decides n units reserved for now + delay, where delay
// >= 0 is at least the wait n needs on this bucket (the RetryAfter of
// TokenBucket's denial, or 0): the units are admitted for use delay from
// now, and with consume the TAT moves as if they arrived then, from now +
// delay or the TAT when that is later. Remaining is read at now. A
// multi-limit reservation passes every bucket the largest delay any of
// them needs.
func TokenBucketReserve(s Bucket, now int64, p Params, n, delay int64, consume bool) (Bucket, Outcome) {
	t := bucketAt(s, now, p)
	o := Outcome{Allowed: true, Delay: delay}
	if consume && n > 0 {
		if at := now + delay; t.T < at {
			t = Bucket{T: at}
		}
		t = bucketAdvance(t, n, p)
		s = t
		o.Wrote = true
	}
	o.Remaining = max(p.Capacity-bucketUsed(t, now, p), 0)
	o.ExpireAt = ceilTAT(t)
	o.ResetAfter = o.ExpireAt - now
	return s, o
}

// Charged is one unit count of Charge, dated: Units (> 0 a charge, < 0 a
// refund) at the instant At (µs).
type Charged struct {
	Units, At int64
}

// ChargeWindow applies spent, in order, to a FixedWindow (sliding false)
// or SlidingWindow state at now, as ratewarden.Store.Charge specifies: units
// dated in the current window count there, in the previous one (sliding
// only) there, elsewhere nowhere; a refund takes away at most what its
// window holds, and a refund dated after now nothing. It returns the new
// state, the units that took effect, and whether the state changed (then
// store it, to expire at expireAt).
func ChargeWindow(s Window, now int64, p Params, sliding bool, spent []Charged) (w Window, applied int64, changed bool, expireAt int64) {
	P := p.Period
	ws := now - now%P
	var curr, prev int64
	switch {
	case s.Start == ws:
		curr, prev = s.Curr, s.Prev
	case sliding && s.Start == ws-P:
		prev = s.Curr
	}
	for _, c := range spent {
		if c.At > now {
			continue
		}
		switch c.At - c.At%P {
		case ws:
			d := chargeCount(&curr, c.Units)
			applied, changed = applied+d, changed || d != 0
		case ws - P:
			if sliding {
				d := chargeCount(&prev, c.Units)
				applied, changed = applied+d, changed || d != 0
			}
		}
	}
	if !changed {
		return s, 0, false, 0
	}
	if !sliding {
		return Window{Start: ws, Curr: curr}, applied, true, ws + P
	}
	return Window{Start: ws, Curr: curr, Prev: prev}, applied, true, ws + 2*P
}

// chargeCount adds units to *count, not below 0, and returns the change.
func chargeCount(count *int64, units int64) int64 {
	d := max(units, -*count)
	*count += d
	return d
}

// ChargeBucket applies spent, in order, to a TokenBucket state at now, as
// ratewarden.Store.Charge specifies: a charge moves the TAT (from its instant,
// or the TAT when later) by Units emission intervals; a refund dated at or
// before now moves it back by as many, not before now; a refund dated
// after now (a reservation given back; At is the TAT it left) only when
// the TAT is within half an emission interval of At. A refund gives back
// at most the units the bucket holds (rounded up). A charge takes the TAT
// at most ChargeHorizon past now (the units beyond are dropped), so that
// every instant stays exact. applied counts a charge's units only when the
// TAT ends up after now (a bucket that has refilled by now kept nothing of
// them). When changed, store the returned state to expire at expireAt;
// expireAt <= now means no state at all.
func ChargeBucket(s Bucket, now int64, p Params, spent []Charged) (b Bucket, applied int64, changed bool, expireAt int64) {
	t := s
	if t.F >= p.Rate {
		t = Bucket{T: t.T + 1}
	}
	var charged int64
	for _, c := range spent {
		switch {
		case c.Units > 0:
			if t.T < c.At {
				t = Bucket{T: c.At}
			}
			n := min(c.Units, bucketRoom(t, now+ChargeHorizon, p))
			t = bucketAdvance(t, n, p)
			charged += n
			changed = true
		case t.T < now: // full: nothing to give back
		case c.At > now && !nearTAT(t, c.At, p):
		default:
			held := bucketUsed(t, now, p)
			if -c.Units < held {
				t = bucketBack(t, -c.Units, p)
			} else {
				// All it holds: back to now or before, a full bucket.
				// (Moving back by more could overflow.)
				t = Bucket{T: now}
			}
			if t.T < now {
				t = Bucket{T: now}
			}
			applied -= min(-c.Units, held)
			changed = true
		}
	}
	if !changed {
		return s, 0, false, 0
	}
	expireAt = ceilTAT(t)
	if expireAt > now {
		applied += charged
	}
	return t, applied, true, expireAt
}

// ChargeHorizon is how far past now (µs) a charge may take a bucket's
// TAT: twice ratewarden.MaxPeriod, so a bucket owes at most MaxPeriod
// beyond a full drain (which takes at most MaxPeriod), and every instant
// stays below 2^53 however large the charges.
const ChargeHorizon = 2 * int64(ratewarden.MaxPeriod/time.Microsecond)

// bucketRoom is the number of whole units whose emission intervals fit
// between the TAT t and the instant h: floor(((h − t.T) × Rate − t.F) /
// Period), 0 when t is at or past h.
func bucketRoom(t Bucket, h int64, p Params) int64 {
	if t.T >= h {
		return 0
	}
	q, r := MulDiv(h-t.T, p.Rate, p.Period)
	if r < t.F {
		q--
	}
	return max(q, 0)
}

// nearTAT reports whether the TAT t is within half an emission interval
// (Period / Rate / 2) of the instant at: |(t.T − at) × Rate + t.F| × 2 <=
// Period.
func nearTAT(t Bucket, at int64, p Params) bool {
	d := t.T - at
	// Beyond Period/Rate + 2 µs, |x| > (|d| − 1) × Rate > Period: not
	// near. Within, |x| < 4 × Period < 2^53: no product overflows (and
	// the scripts' doubles stay exact).
	if lim := p.Period/p.Rate + 2; d > lim || d < -lim {
		return false
	}
	x := d*p.Rate + t.F
	if x < 0 {
		x = -x
	}
	return 2*x <= p.Period
}

// bucketBack moves the TAT of t back by n emission intervals.
func bucketBack(t Bucket, n int64, p Params) Bucket {
	q, r := MulDiv(n, p.Period, p.Rate)
	t.F -= r
	if t.F < 0 {
		q, t.F = q+1, t.F+p.Rate
	}
	t.T -= q
	return t
}

// ChargeLog applies spent, in order, to a SlidingLog state at now, as
// ratewarden.Store.Charge specifies: a charge dated in the window adds Units
// entries at its instant, at most Rate (the log stays oldest first); a
// refund dated in the window (and not after now) removes up to -Units
// entries: those at or before its instant, newest first, then the oldest
// after it (the instant is the caller's estimate, on its own clock, of
// when its units were admitted: it may fall a little before them);
// anything else is dropped. Entries that have left the
// window are dropped first. When changed, store the returned log, to
// expire at expireAt (its newest entry + Period; <= now when it is empty).
// It may reuse the backing array of s.
func ChargeLog(s Log, now int64, p Params, spent []Charged) (l Log, applied int64, changed bool, expireAt int64) {
	cut := now - p.Period
	i := 0
	for i < len(s) && s[i] <= cut {
		i++
	}
	if i > 0 {
		s = s[:copy(s, s[i:])]
		changed = true
	}
	for _, c := range spent {
		switch {
		case c.Units > 0 && c.At > cut:
			// Rate entries at one instant fill the window until they
			// leave it: more would change no decision, only memory.
			n := min(c.Units, p.Rate)
			s = insertLog(s, c.At, n)
			applied, changed = applied+n, true
		case c.Units < 0 && c.At <= now && c.At > cut:
			// The entries at or before c.At, newest first, then the
			// oldest after it: s[k:m], around j, the first entry after
			// c.At.
			j := len(s)
			for j > 0 && s[j-1] > c.At {
				j--
			}
			n := int(min(-c.Units, int64(len(s))))
			k := max(j-n, 0)
			m := k + n
			if k < m {
				s = append(s[:k], s[m:]...)
				applied, changed = applied-int64(m-k), true
			}
		}
	}
	if !changed {
		return s, 0, false, 0
	}
	if len(s) == 0 {
		return s, applied, true, now
	}
	return s, applied, true, s[len(s)-1] + p.Period
}

// insertLog inserts n entries at instant at into the sorted log s, after
// any entries at the same instant.
func insertLog(s Log, at, n int64) Log {
	j := len(s)
	for j > 0 && s[j-1] > at {
		j--
	}
	s = append(s, make(Log, n)...)
	copy(s[j+int(n):], s[j:len(s)-int(n)])
	for k := j; k < j+int(n); k++ {
		s[k] = at
	}
	return s
}
