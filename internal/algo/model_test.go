package algo

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/refmodel"
)

// modelSystem runs one key's state through the algorithm functions, for
// refmodel.RunCase.
type modelSystem struct {
	p   Params
	win Window
	tat Bucket
	log Log
	o   Outcome
}

func (s *modelSystem) Do(now int64, op refmodel.Op) (refmodel.Answer, error) {
	// Keep what tells whether the state changed: a whole log when short,
	// else its length and ends (the logs of 10,000 entries are few).
	win, tat, n := s.win, s.tat, len(s.log)
	var log Log
	if n <= 64 {
		log = slices.Clone(s.log)
	} else {
		log = Log{s.log[0], s.log[n-1]}
	}
	switch s.p.Alg {
	case ratewarden.FixedWindow:
		s.win, s.o = FixedWindow(s.win, now, s.p, op.N, op.Consume)
	case ratewarden.SlidingWindow:
		s.win, s.o = SlidingWindow(s.win, now, s.p, op.N, op.Consume)
	case ratewarden.TokenBucket:
		s.tat, s.o = TokenBucket(s.tat, now, s.p, op.N, op.Consume)
	default:
		s.log, s.o = SlidingLog(s.log, now, s.p, op.N, op.Consume)
	}
	// The returned state equals the input unless something was consumed.
	same := len(s.log) == n && (n <= 64 && slices.Equal(s.log, log) || n > 64 && s.log[0] == log[0] && s.log[n-1] == log[1])
	if !s.o.Wrote && (s.win != win || s.tat != tat || !same) {
		return refmodel.Answer{}, errStateChanged
	}
	return refmodel.Answer{Allowed: s.o.Allowed, Remaining: s.o.Remaining, RetryAfter: s.o.RetryAfter, ResetAfter: s.o.ResetAfter}, nil
}

func (s *modelSystem) LastWrite() (bool, int64) { return s.o.Wrote, s.o.ExpireAt }

type modelError string

func (e modelError) Error() string { return string(e) }

const errStateChanged = modelError("the state changed although Wrote is false")

// modelCases is the number of random cases per algorithm.
const modelCases = 15_000

// TestModel holds the four algorithms to the exact reference model
// (internal/refmodel, math/big, written from the definitions) in every
// field of every step of random sequences over the whole valid range of
// limits, and checks the documented bounds on what they admit, Wrote, and
// that ExpireAt leaves nothing behind.
func TestModel(t *testing.T) {
	cfg := refmodel.Config{MaxSteps: 40, Base: 1_700_000_000_000_000, Spread: 100_000_000_000_000}
	refmodel.RunAll(t, modelCases, 0x6d6f64656c, cfg, func(*testing.T) func(refmodel.Case) (refmodel.System, string, func() error) {
		return func(c refmodel.Case) (refmodel.System, string, func() error) {
			return &modelSystem{p: FromLimit(c.Limit)}, c.Limit.String(), nil
		}
	})
}

// TestModelRegressions runs the fixed regression sequences (float64
// arithmetic used to get them wrong) through the algorithms.
func TestModelRegressions(t *testing.T) {
	for _, sc := range refmodel.Regressions() {
		if err := refmodel.RunScenario(sc, &modelSystem{p: FromLimit(sc.Limit)}, 0); err != nil {
			t.Error(err)
		}
	}
}

// TestModelSustainedRate: at 990,000/s, cost-1 requests sent at every µs
// until denied are admitted at the full rate, not one per µs rounded.
func TestModelSustainedRate(t *testing.T) {
	t.Parallel()
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 990_000, Period: time.Second}
	const span = 1_000_000 // µs
	n, err := refmodel.SustainedRate(lim, &modelSystem{p: FromLimit(lim)}, 1_700_000_000_000_000, span)
	if err != nil {
		t.Fatal(err)
	}
	if n < 989_000 {
		t.Fatalf("%d admitted in 1 s after the burst, want >= 989,000", n)
	}
	t.Logf("%v: %d admitted in 1 simulated second after the burst", lim, n)
}

// TestModelLongRuns runs fewer, longer sequences (300 steps), so that the
// bounds on admissions are checked over many admissions and windows.
func TestModelLongRuns(t *testing.T) {
	for alg := range ratewarden.Algorithm(4) {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			cfg := refmodel.Config{Steps: 300, Base: 1_700_000_000_000_000, Spread: 100_000_000_000_000}
			var st refmodel.Stats
			const cases = 60
			for c := range uint64(cases) {
				seed := uint64(alg)<<32 | c
				r := rand.New(rand.NewPCG(seed, 0x6c6f6e67))
				lim := refmodel.RandLimit(r, alg)
				s, err := refmodel.RunCase(r, lim, &modelSystem{p: FromLimit(lim)}, cfg)
				if err != nil {
					t.Fatalf("case seed %#x: %v", seed, err)
				}
				st.Admitted += s.Admitted
				st.Denied += s.Denied
			}
			t.Logf("%s: %d cases of %d steps (%d denied, %d admissions)", alg, cases, cfg.Steps, st.Denied, st.Admitted)
		})
	}
}
