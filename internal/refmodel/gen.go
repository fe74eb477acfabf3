package refmodel

import (
	"math"
	"math/big"
	"math/rand/v2"
	"time"

	"github.com/ratewarden/ratewarden"
)

// maxPeriodMs is ratewarden.MaxPeriod in whole milliseconds.
const maxPeriodMs = int64(ratewarden.MaxPeriod / time.Millisecond)

// logUniform draws from [lo, hi] with every order of magnitude about as
// likely.
func logUniform(r *rand.Rand, lo, hi int64) int64 {
	if lo >= hi {
		return lo
	}
	x := math.Exp(math.Log(float64(lo)) + r.Float64()*(math.Log(float64(hi))-math.Log(float64(lo))))
	return min(max(int64(x), lo), hi)
}

// RandRate draws a rate in [1, hi], biased to small values, powers of ten
// and the ends of the range.
func RandRate(r *rand.Rand, hi int64) int64 {
	var v int64
	switch r.IntN(9) {
	case 0:
		v = 1 + r.Int64N(3)
	case 1:
		v = 1 + r.Int64N(100)
	case 2:
		v = 1 + r.Int64N(1_000_000)
	case 3, 4:
		v = logUniform(r, 1, hi)
	case 5:
		v = hi - r.Int64N(3)
	case 6:
		v = 1 + r.Int64N(hi)
	case 7:
		v = int64(math.Pow10(r.IntN(13))) + r.Int64N(3) - 1
	default:
		v = 1 + r.Int64N(10_000)
	}
	return min(max(v, 1), hi)
}

// RandPeriod draws a valid period: 1 ms to 366 days in whole milliseconds,
// biased to the common units and the ends of the range.
func RandPeriod(r *rand.Rand) time.Duration {
	var ms int64
	switch r.IntN(8) {
	case 0:
		ms = 1 + r.Int64N(10)
	case 1:
		ms = []int64{1000, 60_000, 3_600_000, 86_400_000}[r.IntN(4)]
	case 2:
		ms = maxPeriodMs - r.Int64N(3)
	case 3, 4:
		ms = logUniform(r, 1, maxPeriodMs)
	case 5:
		ms = 1 + r.Int64N(maxPeriodMs)
	case 6:
		ms = 1 + r.Int64N(5000)
	default:
		ms = (1 + r.Int64N(7)) * []int64{1000, 60_000, 3_600_000, 86_400_000}[r.IntN(4)]
	}
	return time.Duration(min(max(ms, 1), maxPeriodMs)) * time.Millisecond
}

// MaxBurst is the largest Burst Validate accepts for a token bucket of rate
// per period: min(MaxRate, floor(MaxPeriod × rate / period)).
func MaxBurst(rate int64, period time.Duration) int64 {
	q := new(big.Int).Mul(big.NewInt(int64(ratewarden.MaxPeriod)), big.NewInt(rate))
	q.Quo(q, big.NewInt(int64(period)))
	if q.Cmp(big.NewInt(ratewarden.MaxRate)) > 0 {
		return ratewarden.MaxRate
	}
	return q.Int64()
}

// RandLimit draws a valid limit of alg over the whole valid range: rates
// 1..MaxRate (SlidingLog: mostly up to 1,000, sometimes up to MaxLogRate,
// so that logs stay small), periods 1 ms..366 days, token bucket rates up
// to one per µs and bursts 0..MaxRate within the refill bound.
func RandLimit(r *rand.Rand, alg ratewarden.Algorithm) ratewarden.Limit {
	for {
		l := ratewarden.Limit{Algorithm: alg, Period: RandPeriod(r)}
		switch alg {
		case ratewarden.SlidingLog:
			l.Rate = RandRate(r, 1000)
			if r.IntN(10) == 0 {
				l.Rate = RandRate(r, ratewarden.MaxLogRate)
			}
		case ratewarden.TokenBucket:
			us := l.Period.Microseconds()
			l.Rate = RandRate(r, ratewarden.MaxRate)
			if l.Rate > us {
				switch r.IntN(3) {
				case 0:
					l.Rate = us // one per µs
				case 1:
					l.Rate = 1 + r.Int64N(us)
				default:
					l.Rate = RandRate(r, us)
				}
			}
			if r.IntN(2) == 0 {
				hi := MaxBurst(l.Rate, l.Period)
				var b int64
				switch r.IntN(7) {
				case 0:
					b = 1 + r.Int64N(3)
				case 1:
					b = l.Rate + r.Int64N(3) - 1
				case 2:
					b = hi - r.Int64N(2)
				case 3:
					b = logUniform(r, 1, hi)
				case 4:
					b = 1 + r.Int64N(hi)
				case 5:
					b = 2 * l.Rate
				default:
					b = 1 + r.Int64N(min(hi, 100))
				}
				l.Burst = min(max(b, 1), hi)
			}
		default:
			l.Rate = RandRate(r, ratewarden.MaxRate)
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// RandCost draws a cost in [0, capacity], biased to small values, the
// extremes, and the last Remaining and one more.
func RandCost(r *rand.Rand, capacity, lastRemaining int64) int64 {
	var n int64
	switch r.IntN(12) {
	case 0, 1:
		n = 0
	case 2, 3, 4:
		n = 1
	case 5:
		n = 1 + r.Int64N(3)
	case 6:
		n = capacity - r.Int64N(2)
	case 7:
		n = lastRemaining
	case 8:
		n = lastRemaining + 1
	case 9:
		n = r.Int64N(capacity + 1)
	case 10:
		n = logUniform(r, 1, capacity)
	default:
		n = capacity
	}
	return min(max(n, 0), capacity)
}

// RandDelta draws the time to the next step: biased to 0 and 1 µs, to the
// window boundaries of p (±1 µs), to multiples of the emission interval
// P/Rate (rounded both ways, ±1), to the last answer's RetryAfter and
// ResetAfter (±1), and sometimes far (up to 3P).
func RandDelta(r *rand.Rand, p Params, now int64, last Answer, lastCost int64) int64 {
	P := p.Period
	jitter := r.Int64N(3) - 1
	var d int64
	switch r.IntN(16) {
	case 0, 1, 2:
		d = 0
	case 3:
		d = 1
	case 4:
		d = 1 + r.Int64N(3)
	case 5:
		d = P - now%P + jitter // to the next window
	case 6:
		d = 2*P - now%P + jitter
	case 7, 8:
		k := 1 + r.Int64N(3)
		if r.IntN(3) == 0 {
			k = max(lastCost, 1)
		}
		q, m := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(k), big.NewInt(P)), big.NewInt(p.Rate), new(big.Int))
		d = q.Int64()
		if m.Sign() > 0 && r.IntN(2) == 0 {
			d++
		}
		d += jitter
	case 9:
		d = last.RetryAfter + jitter
	case 10:
		d = last.ResetAfter + jitter
	case 11:
		d = r.Int64N(P + 1)
	case 12:
		d = r.Int64N(3*P + 1)
	case 13:
		d = r.Int64N(1000)
	case 14:
		d = logUniform(r, 1, 3*P)
	default:
		d = r.Int64N(P/p.Rate + 2)
	}
	return min(max(d, 0), 3*P+1)
}

// RandStart draws a first instant in [base, base+spread), sometimes on or
// next to a window boundary of p.
func RandStart(r *rand.Rand, p Params, base, spread int64) int64 {
	t := base + r.Int64N(spread)
	switch r.IntN(4) {
	case 0:
		t -= t % p.Period
		if t < base {
			t += p.Period
		}
	case 1:
		t += p.Period - t%p.Period - 1
	}
	return t
}
