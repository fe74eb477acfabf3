package refmodel

import (
	"fmt"
	"math/big"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Scenario is a fixed sequence of requests on one key with the verdicts the
// definitions give, for regressions.
type Scenario struct {
	Name  string
	Limit ratewarden.Limit
	Steps []ScenarioStep
}

// ScenarioStep is one request of a Scenario and its expected verdict.
type ScenarioStep struct {
	At        int64 // µs
	Op        Op
	Allowed   bool
	Remaining int64
}

// Regressions are the sequences float64 arithmetic used to get wrong, and
// the bursts a token bucket must admit at one instant.
func Regressions() []Scenario {
	allowN := func(at, n int64, allowed bool, rem int64) ScenarioStep {
		return ScenarioStep{At: at, Op: Op{Name: "AllowN", N: n, Consume: true}, Allowed: allowed, Remaining: rem}
	}
	const t0 = 1_700_000_000_123_456
	sc := []Scenario{{
		// The previous window's 650,319 weigh exactly 627,833.0…: rounded
		// up, 627,834, so 372,166 remain and 372,167 must be rejected.
		Name:  "sliding window 1,000,000/24h weight rounds up",
		Limit: ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1_000_000, Period: 24 * time.Hour},
		Steps: []ScenarioStep{
			allowN(1_700_854_254_501_380, 650_319, true, 1_000_000-650_319),
			allowN(1_700_873_387_442_163, 372_167, false, 372_166),
		},
	}, {
		// After a full drain, free at +6,914,882,353 µs is
		// 80,031.99999999999: 80,032 must be rejected.
		Name:  "token bucket 999,983/24h fraction below a unit",
		Limit: ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 999_983, Period: 24 * time.Hour},
		Steps: []ScenarioStep{
			allowN(t0, 999_983, true, 0),
			allowN(t0+6_914_882_353, 80_032, false, 80_031),
		},
	}}
	for _, l := range []ratewarden.Limit{
		{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Second},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: time.Minute},
		{Algorithm: ratewarden.TokenBucket, Rate: 7, Period: time.Second, Burst: 14},
	} {
		s := Scenario{Name: fmt.Sprintf("token bucket %v: the full burst at one instant", l), Limit: l}
		for i := range l.Capacity() {
			s.Steps = append(s.Steps, ScenarioStep{At: t0, Op: Op{Name: "Allow", N: 1, Consume: true}, Allowed: true, Remaining: l.Capacity() - i - 1})
		}
		s.Steps = append(s.Steps, ScenarioStep{At: t0, Op: Op{Name: "Allow", N: 1, Consume: true}, Allowed: false, Remaining: 0})
		sc = append(sc, s)
	}
	return sc
}

// Shift returns the smallest multiple of the scenario's period that moves
// its first instant to at least from (0 if it already is): instants moved
// by it keep their place in the windows.
func (s Scenario) Shift(from int64) int64 {
	P := int64(s.Limit.Period / time.Microsecond)
	if d := from - s.Steps[0].At; d > 0 {
		return (d + P - 1) / P * P
	}
	return 0
}

// RunScenario runs s through sys with every instant moved by shift (a
// multiple of the period), comparing each step with the model and with the
// stated verdict.
func RunScenario(s Scenario, sys System, shift int64) error {
	p := FromLimit(s.Limit)
	if shift%p.Period != 0 {
		panic("refmodel: a scenario's shift must be a multiple of its period")
	}
	m := New(p)
	for i, st := range s.Steps {
		now := st.At + shift
		where := fmt.Sprintf("%s: limit %q, step %d: %s(n=%d) at now=%d µs", s.Name, s.Limit.String(), i+1, st.Op.Name, st.Op.N, now)
		want := m.Eval(now, st.Op.N, st.Op.Consume)
		if want.Allowed != st.Allowed || want.Remaining != st.Remaining {
			return fmt.Errorf("%s: the model says %v, the scenario Allowed=%v Remaining=%d", where, want, st.Allowed, st.Remaining)
		}
		got, err := sys.Do(now, st.Op)
		if err != nil {
			return fmt.Errorf("%s: %v", where, err)
		}
		if got != want {
			return fmt.Errorf("%s:\n  got  %v\n  want %v", where, got, want)
		}
	}
	return nil
}

// SustainedRate drains the full bucket of the token bucket lim at t0 (one
// request of its capacity), then for every µs of (t0, t0+span] sends
// cost-1 requests (Allow) until one is denied (at most capacity + 1 per
// instant), and returns how many were admitted after the drain. By the
// definition that is exactly floor(span × Rate / Period), which it checks:
// every unit of refill is admitted as soon as it is whole.
func SustainedRate(lim ratewarden.Limit, sys System, t0, span int64) (int64, error) {
	p := FromLimit(lim)
	if a, err := sys.Do(t0, Op{Name: "AllowN", N: p.Capacity, Consume: true}); err != nil || !a.Allowed {
		return 0, fmt.Errorf("%v: draining the full bucket at %d: %v, %v", lim, t0, a, err)
	}
	var admitted int64
	for t := t0 + 1; t <= t0+span; t++ {
		for k := int64(0); ; k++ {
			if k > p.Capacity {
				return admitted, fmt.Errorf("%v: more than the capacity admitted at %d", lim, t)
			}
			a, err := sys.Do(t, Op{Name: "Allow", N: 1, Consume: true})
			if err != nil {
				return admitted, fmt.Errorf("%v at %d: %v", lim, t, err)
			}
			if !a.Allowed {
				break
			}
			admitted++
		}
	}
	want := new(big.Int).Mul(big.NewInt(span), big.NewInt(p.Rate))
	want.Quo(want, big.NewInt(p.Period))
	if admitted != want.Int64() {
		return admitted, fmt.Errorf("%v: %d admitted over %d µs after the drain, want floor(span × Rate / P) = %s", lim, admitted, span, want)
	}
	return admitted, nil
}
