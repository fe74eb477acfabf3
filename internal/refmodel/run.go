package refmodel

import (
	"fmt"
	"math/rand/v2"

	"github.com/ratewarden/ratewarden"
)

// Op is one request to a System.
type Op struct {
	Name    string // Allow, AllowN or Peek: what the System should call
	N       int64
	Consume bool
}

// System is an implementation under test, holding one key under one limit.
type System interface {
	// Do decides op at instant now (µs).
	Do(now int64, op Op) (Answer, error)
}

// Expirer is implemented by a System that reports, after Do, whether the
// request wrote a state and the instant from which that state is
// equivalent to none (algo.Outcome's Wrote and ExpireAt). RunCase checks
// that a write happened exactly when something was consumed, and that the
// model holds nothing any more at ExpireAt.
type Expirer interface {
	LastWrite() (wrote bool, expireAt int64)
}

// Config shapes the steps of RunCase.
type Config struct {
	// MaxSteps bounds the steps of a case (at least 1); a case draws 1 to
	// MaxSteps of them, mostly few.
	MaxSteps int
	// Steps, when positive, is the exact number of steps of every case
	// instead (long runs, for the bounds over many admissions).
	Steps int
	// Base and Spread place the first instant in [Base, Base+Spread).
	Base, Spread int64
	// LimiterOps restricts the operations to the ratewarden.Limiter's:
	// Allow (1, consume), AllowN (n, consume) and Peek (1, no consume).
	// Otherwise any cost is also evaluated without consuming (Peek n).
	LimiterOps bool
}

// Stats counts what a case exercised.
type Stats struct {
	Steps, Denied, Admitted int
}

// RunCase drives sys and the model through one random sequence of steps on
// lim and returns the first difference in any field of any step, a broken
// bound, or a broken Expirer claim, as an error naming the limit, the step,
// the instant, the cost and both answers.
func RunCase(r *rand.Rand, lim ratewarden.Limit, sys System, cfg Config) (Stats, error) {
	p := FromLimit(lim)
	m := New(p)
	b := NewBounds(p)
	steps := 1 + r.IntN(max(cfg.MaxSteps, 1))
	if r.IntN(4) != 0 {
		steps = 1 + r.IntN(min(max(cfg.MaxSteps, 1), 8))
	}
	if cfg.Steps > 0 {
		steps = cfg.Steps
	}
	now := RandStart(r, p, cfg.Base, cfg.Spread)
	var st Stats
	var last Answer
	var lastCost int64
	for i := range steps {
		if i > 0 {
			now += RandDelta(r, p, now, last, lastCost)
		}
		op := randOp(r, p, last, cfg.LimiterOps)
		before := m.clone()
		want := m.Eval(now, op.N, op.Consume)
		got, err := sys.Do(now, op)
		where := func() string {
			return fmt.Sprintf("limit %q (%v), step %d of %d: %s(n=%d, consume=%v) at now=%d µs", lim.String(), p, i+1, steps, op.Name, op.N, op.Consume, now)
		}
		if err != nil {
			return st, fmt.Errorf("%s: error %v", where(), err)
		}
		if got != want {
			return st, fmt.Errorf("%s:\n  got  %v\n  want %v (model)\n  model state before: %s", where(), got, want, before.String())
		}
		if x, ok := sys.(Expirer); ok {
			wrote, at := x.LastWrite()
			consumed := want.Allowed && op.Consume && op.N > 0
			if wrote != consumed {
				return st, fmt.Errorf("%s: Wrote=%v, but consumed=%v", where(), wrote, consumed)
			}
			if wrote && (at <= now || !m.EmptyAt(at)) {
				return st, fmt.Errorf("%s: ExpireAt %d (now%+d), but the state is not empty then: %s", where(), at, at-now, m)
			}
		}
		st.Steps++
		if !want.Allowed {
			st.Denied++
		}
		if want.Allowed && op.Consume && op.N > 0 {
			st.Admitted++
			if err := b.Admit(now, op.N); err != nil {
				return st, fmt.Errorf("%s: %v", where(), err)
			}
		}
		last, lastCost = want, op.N
	}
	return st, nil
}

func randOp(r *rand.Rand, p Params, last Answer, limiterOps bool) Op {
	switch r.IntN(6) {
	case 0:
		return Op{Name: "Allow", N: 1, Consume: true}
	case 1:
		if limiterOps {
			return Op{Name: "Peek", N: 1}
		}
		return Op{Name: "Peek", N: RandCost(r, p.Capacity, last.Remaining)}
	default:
		return Op{Name: "AllowN", N: RandCost(r, p.Capacity, last.Remaining), Consume: true}
	}
}
