// Package refmodel is an exact reference model of ratewarden's four
// algorithms, for tests only. It is written from the documented definitions
// (docs/algorithms.md, the Result and Limit docs), not from internal/algo's
// closed forms, and computes with math/big, so that a test can hold algo,
// memstore and the Redis scripts to the definitions at every step:
//
//   - FixedWindow: epoch-aligned windows [k·P, (k+1)·P); n is admitted iff
//     the window's count + n <= Rate.
//   - SlidingWindow: the weighted approximation: with ws = now − now mod P,
//     e = now − ws, curr the count of [ws, ws+P) and prev that of
//     [ws−P, ws), estimate = curr + ceil(prev × (P − e) / P) (a big.Rat);
//     n is admitted iff estimate + n <= Rate.
//   - TokenBucket (GCRA): the theoretical arrival time TAT is a big.Rat;
//     with tat = max(TAT, now), used = (tat − now) × Rate / P and free =
//     Capacity − used, n is admitted iff n <= free, and consuming sets
//     TAT = tat + n × P / Rate exactly.
//   - SlidingLog: the multiset of admitted instants; n is admitted iff the
//     count in (now − P, now] + n <= Rate.
//
// For every algorithm the Result fields mean what the Result doc says, and
// the model computes them from that meaning rather than from a formula:
// Remaining is the largest cost admitted right now (after this request's
// consumption), RetryAfter the smallest d >= 1 such that the same request
// is admitted at now + d if nothing else consumes, ResetAfter the smallest
// d >= 0 at which the full allowance is back. RetryAfter and ResetAfter are
// found by a binary search over d on the admission predicate, which is
// monotone in d when nothing is consumed (each count only leaves its window;
// the package's tests check the searches against linear scans).
//
// Rejected requests, cost 0 and evaluations without consume change nothing.
// Instants must not go back (the model panics): the tests drive time
// forward only.
package refmodel

import (
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Params is a limit in integer microseconds. The model accepts any
// positive Period (its own tests use periods of a few µs); a valid
// ratewarden.Limit gives whole milliseconds.
type Params struct {
	Alg      ratewarden.Algorithm
	Rate     int64
	Period   int64 // µs
	Capacity int64 // TokenBucket: Burst, or Rate when Burst is 0; else Rate
}

// FromLimit converts l (assumed valid) to Params.
func FromLimit(l ratewarden.Limit) Params {
	p := Params{Alg: l.Algorithm, Rate: l.Rate, Period: int64(l.Period / time.Microsecond), Capacity: l.Rate}
	if l.Algorithm == ratewarden.TokenBucket && l.Burst != 0 {
		p.Capacity = l.Burst
	}
	return p
}

func (p Params) String() string {
	return fmt.Sprintf("%s rate=%d period=%dµs capacity=%d", p.Alg, p.Rate, p.Period, p.Capacity)
}

// Answer is the model's verdict on one request, in µs.
type Answer struct {
	Allowed    bool
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
}

func (a Answer) String() string {
	return fmt.Sprintf("{Allowed:%v Remaining:%d RetryAfter:%dµs ResetAfter:%dµs}", a.Allowed, a.Remaining, a.RetryAfter, a.ResetAfter)
}

// event is n units admitted at instant t.
type event struct{ t, n int64 }

// Model is one key's state under one limit. Make it with New.
type Model struct {
	p Params
	// adm holds the admissions (window algorithms and log) that can still
	// matter, oldest first: those after now − 2P.
	adm []event
	// tat is the TokenBucket's theoretical arrival time, nil for none (a
	// full bucket).
	tat  *big.Rat
	last int64
	seen bool
	// scratch holds temporaries of the search predicates.
	scratch struct{ x, y big.Int }
}

// New returns the model of a key with no state under p.
func New(p Params) *Model {
	if p.Rate <= 0 || p.Period <= 0 || p.Capacity <= 0 {
		panic(fmt.Sprintf("refmodel: bad params %v", p))
	}
	return &Model{p: p}
}

// clone returns an independent copy (the TAT is never modified in place).
func (m *Model) clone() *Model {
	c := Model{p: m.p, tat: m.tat, last: m.last, seen: m.seen}
	c.adm = append([]event(nil), m.adm...)
	return &c
}

// Params returns the model's limit.
func (m *Model) Params() Params { return m.p }

// Eval decides a request of n units at now and, when consume is set and the
// request is admitted, consumes them.
func (m *Model) Eval(now, n int64, consume bool) Answer {
	if m.seen && now < m.last {
		panic(fmt.Sprintf("refmodel: time went back from %d to %d", m.last, now))
	}
	if n < 0 || n > m.p.Capacity {
		panic(fmt.Sprintf("refmodel: cost %d outside [0, %d]", n, m.p.Capacity))
	}
	m.seen, m.last = true, now
	m.prune(now)
	a := Answer{Allowed: m.admitsAt(now, n)}
	if a.Allowed && consume && n > 0 {
		m.consume(now, n)
	}
	a.Remaining = m.remaining(now)
	if !a.Allowed {
		a.RetryAfter = search(1, m.horizon(now), func(d int64) bool { return m.admitsAt(now+d, n) }, m.boundaries(now)...)
	}
	a.ResetAfter = m.resetAfter(now)
	return a
}

// EmptyAt reports whether, from instant t (>= the last evaluated instant)
// on, the state answers exactly like no state: nothing admitted is still
// counted, and the bucket is full.
func (m *Model) EmptyAt(t int64) bool {
	if t < m.last {
		return false
	}
	P := m.p.Period
	switch m.p.Alg {
	case ratewarden.FixedWindow:
		ws := windowStart(t, P)
		return m.countIn(ws, ws+P) == 0
	case ratewarden.SlidingWindow:
		ws := windowStart(t, P)
		return m.countIn(ws-P, ws+P) == 0
	case ratewarden.TokenBucket:
		return m.tat == nil || m.tat.Cmp(ratInt(t)) <= 0
	default:
		return m.countIn(t-P+1, t+1) == 0
	}
}

// String describes the state, for failure messages.
func (m *Model) String() string {
	var b strings.Builder
	b.WriteString(m.p.String())
	if m.p.Alg == ratewarden.TokenBucket {
		if m.tat == nil {
			b.WriteString(" TAT=none")
		} else {
			fmt.Fprintf(&b, " TAT=%s (≈%s)", m.tat.RatString(), m.tat.FloatString(6))
		}
		return b.String()
	}
	fmt.Fprintf(&b, " admissions(%d, after last−2P)=[", len(m.adm))
	for i, e := range m.adm {
		if i == 8 {
			b.WriteString(" …")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d@%d", e.n, e.t)
	}
	b.WriteByte(']')
	return b.String()
}

// prune forgets admissions no query from now on can count: every query
// looks at instants >= now and at most 2P back from them.
func (m *Model) prune(now int64) {
	i := 0
	for i < len(m.adm) && m.adm[i].t <= now-2*m.p.Period {
		i++
	}
	if i > 0 {
		m.adm = append(m.adm[:0], m.adm[i:]...)
	}
}

func (m *Model) consume(now, n int64) {
	if m.p.Alg != ratewarden.TokenBucket {
		m.adm = append(m.adm, event{now, n})
		return
	}
	tat := m.tatAt(now)
	step := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(n), big.NewInt(m.p.Period)), big.NewInt(m.p.Rate))
	m.tat = new(big.Rat).Add(tat, step)
}

// countIn is the number of units admitted at instants in [lo, hi).
func (m *Model) countIn(lo, hi int64) int64 {
	var c int64
	for _, e := range m.adm {
		if e.t >= lo && e.t < hi {
			c += e.n
		}
	}
	return c
}

func windowStart(t, P int64) int64 { return (t / P) * P }

// estimate is SlidingWindow's weighted count at t: curr plus the rational
// prev × (P − e) / P rounded up, by exact big.Int division (the same value
// as a big.Rat's ceiling, without reducing the fraction first).
func (m *Model) estimate(t int64) *big.Int {
	P := m.p.Period
	ws := windowStart(t, P)
	curr := m.countIn(ws, ws+P)
	prev := m.countIn(ws-P, ws)
	est := big.NewInt(curr)
	if prev == 0 {
		return est
	}
	s := &m.scratch
	s.x.Mul(big.NewInt(prev), big.NewInt(t-ws-P)) // −prev × (P − e)
	s.y.SetInt64(P)
	s.x.Div(&s.x, &s.y) // floor(−x) = −ceil(x): Euclidean division by P > 0
	return est.Sub(est, &s.x)
}

// tatAt is max(TAT, t).
func (m *Model) tatAt(t int64) *big.Rat {
	T := ratInt(t)
	if m.tat != nil && m.tat.Cmp(T) > 0 {
		return m.tat
	}
	return T
}

// lead returns the TAT's lead over t as lead / B (B the TAT's
// denominator), or nil when the TAT is not after t (a full bucket).
func (m *Model) lead(t int64) (lead, B *big.Int) {
	if m.tat == nil {
		return nil, nil
	}
	B = m.tat.Denom()
	lead = new(big.Int).Mul(big.NewInt(t), B)
	lead.Sub(m.tat.Num(), lead)
	if lead.Sign() <= 0 {
		return nil, nil
	}
	return lead, B
}

// free is TokenBucket's Capacity − (max(TAT, t) − t) × Rate / P, as a
// big.Rat (the tests check the integer forms above against it).
func (m *Model) free(t int64) *big.Rat {
	used := new(big.Rat).Sub(m.tatAt(t), ratInt(t))
	used.Mul(used, big.NewRat(m.p.Rate, m.p.Period))
	return used.Sub(ratInt(m.p.Capacity), used)
}

// admitsAt reports whether n units are admitted at t on the current state.
func (m *Model) admitsAt(t, n int64) bool {
	P, R := m.p.Period, m.p.Rate
	switch m.p.Alg {
	case ratewarden.FixedWindow:
		ws := windowStart(t, P)
		return m.countIn(ws, ws+P)+n <= R
	case ratewarden.SlidingWindow:
		est := m.estimate(t)
		return est.Add(est, big.NewInt(n)).Cmp(big.NewInt(R)) <= 0
	case ratewarden.TokenBucket:
		// n <= Capacity − (tat − t) × R / P with tat − t = lead / B:
		// lead × R <= (Capacity − n) × P × B, all exact integers.
		lead, B := m.lead(t)
		if lead == nil {
			return true
		}
		s := &m.scratch
		s.x.Mul(lead, big.NewInt(R))
		s.y.Mul(big.NewInt(m.p.Capacity-n), big.NewInt(P))
		s.y.Mul(&s.y, B)
		return s.x.Cmp(&s.y) <= 0
	default:
		return m.countIn(t-P+1, t+1)+n <= R
	}
}

// remaining is the largest cost admitted at t, floored at 0: Rate − count,
// Rate − estimate, or floor(free).
func (m *Model) remaining(t int64) int64 {
	P, R := m.p.Period, m.p.Rate
	var rem *big.Int
	switch m.p.Alg {
	case ratewarden.FixedWindow:
		ws := windowStart(t, P)
		rem = big.NewInt(R - m.countIn(ws, ws+P))
	case ratewarden.SlidingWindow:
		rem = new(big.Int).Sub(big.NewInt(R), m.estimate(t))
	case ratewarden.TokenBucket:
		// floor(Capacity − lead × R / (P × B)) = Capacity − ceil(…).
		rem = big.NewInt(m.p.Capacity)
		if lead, B := m.lead(t); lead != nil {
			used := new(big.Int).Mul(lead, big.NewInt(R))
			used.Neg(used)
			used.Div(used, new(big.Int).Mul(big.NewInt(P), B)) // −ceil
			rem.Add(rem, used)
		}
	default:
		rem = big.NewInt(R - m.countIn(t-P+1, t+1))
	}
	if rem.Sign() < 0 {
		return 0
	}
	return rem.Int64()
}

// full reports whether the whole allowance is available at t.
func (m *Model) full(t int64) bool {
	if m.p.Alg == ratewarden.TokenBucket {
		lead, _ := m.lead(t)
		return lead == nil
	}
	return m.remaining(t) == m.p.Capacity
}

// resetAfter is the smallest d >= 0 with the full allowance at now + d.
// For TokenBucket that is ceil(max(TAT, now) − now) by definition (the
// bucket is full exactly when the TAT is not in the future); the others
// search.
func (m *Model) resetAfter(now int64) int64 {
	if m.p.Alg == ratewarden.TokenBucket {
		return m.tbFullIn(now)
	}
	return search(0, m.horizon(now), func(d int64) bool { return m.full(now + d) }, m.boundaries(now)...)
}

// boundaries are the delays to the next two window starts (window
// algorithms), where the predicates may jump: the searches probe them first.
func (m *Model) boundaries(now int64) []int64 {
	if m.p.Alg != ratewarden.FixedWindow && m.p.Alg != ratewarden.SlidingWindow {
		return nil
	}
	d := windowStart(now, m.p.Period) + m.p.Period - now
	return []int64{d, d + m.p.Period}
}

// tbFullIn is ceil(max(TAT, now) − now): the delay until the bucket is full.
func (m *Model) tbFullIn(now int64) int64 {
	lead, B := m.lead(now)
	if lead == nil {
		return 0
	}
	d := new(big.Int).Neg(lead)
	d.Div(d, B) // −ceil(lead / B)
	return -d.Int64()
}

// horizon is a delay (>= 1) after which nothing admitted so far is counted
// any more: every request of at most Capacity is admitted then, and the
// allowance is full. It bounds the searches.
func (m *Model) horizon(now int64) int64 {
	P := m.p.Period
	switch m.p.Alg {
	case ratewarden.FixedWindow:
		return windowStart(now, P) + P - now
	case ratewarden.SlidingWindow:
		return windowStart(now, P) + 2*P - now
	case ratewarden.TokenBucket:
		return max(m.tbFullIn(now), 1)
	default:
		h := int64(1)
		for _, e := range m.adm {
			h = max(h, e.t+P-now)
		}
		return h
	}
}

// search returns the smallest d in [lo, hi] with ok(d). ok must be
// monotone (false, then true) on [lo, hi] and true at hi; search panics if
// ok(hi) is false, as that means the model's bound is wrong. It probes lo,
// the given delays (ascending) and hi − 1 before bisecting: any probe of a
// monotone predicate narrows the range, and those settle most searches.
func search(lo, hi int64, ok func(int64) bool, probes ...int64) int64 {
	if !ok(hi) {
		panic(fmt.Sprintf("refmodel: predicate false at the search bound %d", hi))
	}
	if lo == hi || ok(lo) {
		return lo
	}
	lo++ // invariant: ok is false below lo and true at hi
	for _, d := range probes {
		if d < lo || d >= hi {
			continue
		}
		if ok(d) {
			hi = d
			break
		}
		lo = d + 1
	}
	if lo < hi && !ok(hi-1) {
		return hi
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func ratInt(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }

// floorRat is the largest integer <= x.
func floorRat(x *big.Rat) *big.Int {
	// Euclidean division by the (positive) denominator rounds down.
	return new(big.Int).Div(x.Num(), x.Denom())
}

// ceilRat is the smallest integer >= x.
func ceilRat(x *big.Rat) *big.Int {
	f := floorRat(new(big.Rat).Neg(x))
	return f.Neg(f)
}
