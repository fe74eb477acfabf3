package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/refmodel"
	"github.com/ratewarden/ratewarden/memstore"
)

// modelLimiter is a memstore-backed ratewarden.Limiter on a clock the test
// sets.
type modelLimiter struct {
	clk testClock
	lim *ratewarden.Limiter
}

func newModelLimiter(t *testing.T) *modelLimiter {
	t.Helper()
	ml := new(modelLimiter)
	s, err := memstore.New(memstore.WithClock(ml.clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if ml.lim, err = ratewarden.New(s); err != nil {
		t.Fatal(err)
	}
	return ml
}

// modelKey is one key under one limit of a modelLimiter, for
// refmodel.RunCase: it calls Allow, AllowN or Peek as the step says.
type modelKey struct {
	ml  *modelLimiter
	key string
	lim ratewarden.Limit
}

func (k modelKey) Do(now int64, op refmodel.Op) (refmodel.Answer, error) {
	k.ml.clk.Set(now)
	ctx := context.Background()
	var res ratewarden.Result
	var err error
	switch op.Name {
	case "Allow":
		res, err = k.ml.lim.Allow(ctx, k.key, k.lim)
	case "Peek":
		res, err = k.ml.lim.Peek(ctx, k.key, k.lim)
	default:
		res, err = k.ml.lim.AllowN(ctx, k.key, k.lim, op.N)
	}
	if err != nil {
		return refmodel.Answer{}, err
	}
	if res.Limit != k.lim || res.Source != ratewarden.SourceStore {
		return refmodel.Answer{}, fmt.Errorf("Result.Limit %v, Source %v; want %v, store", res.Limit, res.Source, k.lim)
	}
	return refmodel.Answer{Allowed: res.Allowed, Remaining: res.Remaining, RetryAfter: micros(res.RetryAfter), ResetAfter: micros(res.ResetAfter)}, nil
}

// micros converts a Result duration; -1 flags one that is not a whole
// number of µs (the model's durations always are).
func micros(d time.Duration) int64 {
	if d%time.Microsecond != 0 {
		return -1
	}
	return int64(d / time.Microsecond)
}

// memstoreModelCases is the number of random cases per algorithm.
const memstoreModelCases = 10_000

// TestModel drives the memstore through the Limiter (Allow, AllowN, Peek)
// on a fake clock and holds every field of every result to the exact
// reference model (internal/refmodel), over random limits of the whole
// valid range, with the documented bounds checked on what it admits.
func TestModel(t *testing.T) {
	cfg := refmodel.Config{MaxSteps: 40, Base: 1_700_000_000_000_000, Spread: 100_000_000_000_000, LimiterOps: true}
	refmodel.RunAll(t, memstoreModelCases, 0x6d656d, cfg, func(t *testing.T) func(refmodel.Case) (refmodel.System, string, func() error) {
		ml := newModelLimiter(t)
		return func(c refmodel.Case) (refmodel.System, string, func() error) {
			k := modelKey{ml: ml, key: fmt.Sprintf("model-%d", c.I), lim: c.Limit}
			return k, "key " + k.key, func() error { return ml.lim.Reset(context.Background(), k.key, c.Limit) }
		}
	})
}

// TestModelRegressions runs the fixed regression sequences (float64
// arithmetic used to get them wrong) through the Limiter.
func TestModelRegressions(t *testing.T) {
	ml := newModelLimiter(t)
	for i, sc := range refmodel.Regressions() {
		k := modelKey{ml: ml, key: fmt.Sprintf("regression-%d", i), lim: sc.Limit}
		if err := refmodel.RunScenario(sc, k, 0); err != nil {
			t.Error(err)
		}
	}
}

// TestModelSustainedRate: at 990,000/s, cost-1 requests (Allow) sent at
// every µs until denied are admitted at the full rate.
func TestModelSustainedRate(t *testing.T) {
	t.Parallel()
	ml := newModelLimiter(t)
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 990_000, Period: time.Second}
	const span = 1_000_000 // µs
	n, err := refmodel.SustainedRate(lim, modelKey{ml: ml, key: "sustained", lim: lim}, 1_700_000_000_000_000, span)
	if err != nil {
		t.Fatal(err)
	}
	if n < 989_000 {
		t.Fatalf("%d admitted in 1 s after the burst, want >= 989,000", n)
	}
	t.Logf("%v: %d admitted in 1 simulated second after the burst", lim, n)
}
