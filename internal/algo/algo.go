// Package algo holds the four rate-limiting algorithms as pure functions:
// (state, now, limit, cost) -> (new state, outcome). No I/O, no clock.
//
// It is the specification the Redis Lua scripts mirror operation for
// operation; a differential test checks they agree. All instants and
// durations are integer microseconds (now is microseconds since the Unix
// epoch, as Redis TIME gives it). Where a computation needs a fraction it
// uses float64 in the same order of operations as Lua's doubles, and rounds
// with Floor/Ceil exactly where the scripts do, so both agree bit for bit.
//
// Each function evaluates with consume false (the verdict for n, nothing
// changed: used for Peek and for all-or-nothing multi-limit checks) or true
// (consume n when allowed). It returns the state to store, which equals the
// input state unless something was consumed.
package algo

import (
	"math"

	"github.com/ratewarden/ratewarden"
)

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
}

// Window is the state of FixedWindow and SlidingWindow: the start of the
// current window, its count, and (SlidingWindow) the previous window's count.
type Window struct {
	Start, Curr, Prev int64
}

// FixedWindow counts units in epoch-aligned windows [k·P, (k+1)·P).
func FixedWindow(s Window, now int64, p Params, n int64, consume bool) (Window, Outcome) {
	ws := now - now%p.Period
	end := ws + p.Period
	var count int64
	if s.Start == ws {
		count = s.Curr
	}
	rem := max(p.Rate-count, 0)
	o := Outcome{ExpireAt: end}
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
	return s, o
}

// slidingWeighted is the previous window's count weighted by the share of
// the sliding window it still covers, rounded up (conservative).
func slidingWeighted(prev, period, elapsed int64) int64 {
	return int64(math.Ceil(float64(prev) * float64(period-elapsed) / float64(period)))
}

// slidingFirst returns the smallest elapsed time e in [0, period] at which
// slidingWeighted(prev, period, e) <= budget (budget >= 0, prev > 0).
func slidingFirst(prev, period, budget int64) int64 {
	e := period - int64(math.Floor(float64(budget)*float64(period)/float64(prev)))
	// The float estimate is within a few µs of the answer; settle it
	// exactly in both directions.
	e = min(max(e, 0), period)
	for e > 0 && slidingWeighted(prev, period, e-1) <= budget {
		e--
	}
	for e < period && slidingWeighted(prev, period, e) > budget {
		e++
	}
	return e
}

// SlidingWindow estimates the count over the last Period as
// curr + ceil(prev × (P − elapsed) / P), where elapsed is the time since the
// current fixed window began.
func SlidingWindow(s Window, now int64, p Params, n int64, consume bool) (Window, Outcome) {
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
	o := Outcome{ExpireAt: ws + 2*P}
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
	return s, o
}

// gcraFree is the number of units (fractional) still free in a bucket
// whose theoretical arrival time is diff µs ahead of now.
func gcraFree(diff int64, p Params) float64 {
	return float64(p.Capacity) - float64(diff)*float64(p.Rate)/float64(p.Period)
}

// TokenBucket is GCRA. The state is the theoretical arrival time tat (µs):
// each unit moves it T = Period/Rate later, and a request of n units fits
// while tat − now, in units, leaves room for n of the Capacity. A tat in the
// past is the same as a full bucket (tat = now).
func TokenBucket(tat int64, now int64, p Params, n int64, consume bool) (int64, Outcome) {
	t := max(tat, now)
	free := gcraFree(t-now, p)
	rem := max(int64(math.Floor(free)), 0)
	var o Outcome
	if n <= rem {
		o.Allowed = true
		if consume && n > 0 {
			t += int64(math.Ceil(float64(n) * float64(p.Period) / float64(p.Rate)))
			tat = t
			rem = max(int64(math.Floor(gcraFree(t-now, p))), 0)
			o.Wrote = true
		}
	} else {
		diff := t - now
		r := int64(math.Ceil(float64(diff) - float64(p.Capacity-n)*float64(p.Period)/float64(p.Rate)))
		// Settle the float estimate exactly, in both directions.
		r = min(max(r, 1), diff)
		for r > 1 && float64(n) <= gcraFree(diff-(r-1), p) {
			r--
		}
		for r < diff && float64(n) > gcraFree(diff-r, p) {
			r++
		}
		o.RetryAfter = r
	}
	o.Remaining = rem
	o.ResetAfter = t - now
	o.ExpireAt = t
	return tat, o
}

// Log is the state of SlidingLog: the timestamps (µs) of admitted units,
// oldest first, one entry per unit. Entries at or before now − Period are
// stale and dropped on the next evaluation.
type Log []int64

// SlidingLog admits n while fewer than Rate − n + 1 units were admitted in
// (now − Period, now]. It may reuse the backing array of s.
func SlidingLog(s Log, now int64, p Params, n int64, consume bool) (Log, Outcome) {
	cut := now - p.Period
	i := 0
	for i < len(s) && s[i] <= cut {
		i++
	}
	live := s[i:]
	count := int64(len(live))
	rem := max(p.Rate-count, 0)
	var o Outcome
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
	return s, o
}
