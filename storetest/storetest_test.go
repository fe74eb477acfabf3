package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// mutant wraps a correct store and breaks one promise of ratewarden.Store.
type mutant struct {
	ratewarden.Store
	bug string
}

func (m *mutant) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	r := *req
	switch m.bug {
	case "peek-consumes":
		r.Peek = false
	case "reserve-ignored":
		r.MaxDelay = 0
	case "long-keys-collide":
		if len(r.Key) > 100 {
			r.Key = r.Key[:100]
		}
	case "not-all-or-nothing":
		if len(r.Limits) > 1 {
			for i := range r.Limits {
				one := ratewarden.Request{Key: r.Key, Limits: r.Limits[i : i+1], Cost: r.Cost, Peek: r.Peek}
				if err := m.Store.Check(ctx, &one, res[i:i+1]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := m.Store.Check(ctx, &r, res); err != nil {
		return err
	}
	for i := range res {
		switch m.bug {
		case "wrong-limit":
			res[i].Limit.Rate++
		case "retry-zero":
			res[i].RetryAfter = 0
		case "early-retry":
			res[i].RetryAfter /= 2
		}
	}
	return nil
}

func (m *mutant) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if m.bug == "refund-lost" {
		kept := spent[:0:0]
		for _, sp := range spent {
			if sp.Units > 0 {
				kept = append(kept, sp)
			}
		}
		if len(kept) == 0 {
			clear(applied)
			return nil
		}
		spent = kept
	}
	return m.Store.Charge(ctx, key, limits, spent, applied)
}

func (m *mutant) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	if m.bug == "permit-overbooks" {
		max++
	}
	return m.Store.Acquire(ctx, key, holder, max, ttl)
}

func (m *mutant) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	if m.bug == "reset-noop" {
		return nil
	}
	if m.bug == "reset-all-limits" {
		all := []ratewarden.Limit{}
		for _, alg := range []ratewarden.Algorithm{0, 1, 2, 3} {
			for _, p := range []time.Duration{time.Hour, 61 * time.Minute, 59 * time.Minute} {
				all = append(all, ratewarden.Limit{Algorithm: alg, Rate: 1, Period: p})
			}
		}
		return m.Store.Reset(ctx, key, all...)
	}
	return m.Store.Reset(ctx, key, limits...)
}

func subject(t *testing.T, bug string) storetest.Subject {
	clk := &fakeClock{t: time.Date(2026, 3, 14, 15, 9, 26, 535_897_000, time.UTC)}
	s, err := memstore.New(memstore.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var st ratewarden.Store = s
	if bug != "" {
		st = &mutant{Store: s, bug: bug}
	}
	return storetest.Subject{Store: st, Advance: clk.Advance}
}

// TestRun runs the suite on memstore, or, in a child process, on the
// mutant named by STORETEST_MUTANT.
func TestRun(t *testing.T) {
	bug := os.Getenv("STORETEST_MUTANT")
	storetest.Run(t, func(t *testing.T) storetest.Subject { return subject(t, bug) })
}

// TestSuiteCatchesBugs runs the suite against stores with one bug each and
// checks that it fails, in the subtest meant to catch that bug.
func TestSuiteCatchesBugs(t *testing.T) {
	if os.Getenv("STORETEST_MUTANT") != "" {
		return // in a child: TestRun does the work
	}
	for bug, subtest := range map[string]string{
		"peek-consumes":      "TestRun/PeekConsumesNothing/",
		"long-keys-collide":  "TestRun/OddKeys/",
		"not-all-or-nothing": "TestRun/MultiLimitAllOrNothing/",
		"wrong-limit":        "TestRun/AdmitsCapacityThenDenies/",
		"retry-zero":         "TestRun/RetryAfter/",
		"early-retry":        "TestRun/RetryAfter/",
		"reset-noop":         "TestRun/Reset/",
		"reset-all-limits":   "TestRun/Reset/",
		"refund-lost":        "TestRun/Settle/",
		"permit-overbooks":   "TestRun/Permits",
		"reserve-ignored":    "TestRun/Reserve",
	} {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestRun$", "-test.count=1")
			cmd.Env = append(os.Environ(), "STORETEST_MUTANT="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store with bug %q", bug)
			}
			if !strings.Contains(string(out), "--- FAIL: "+subtest) {
				t.Fatalf("bug %q: want a failure in %s, got:\n%s", bug, subtest, tail(string(out)))
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// stalling is a correct store on real time that, in the first attempt of
// the time-based subtests with half-second periods, stalls the call that
// must be denied for a whole period: a busy machine at its worst. The
// suite must tell that the call came late and rerun with a longer period,
// not fail the store. It records which subtests reran.
type stalling struct {
	ratewarden.Store
	mu     sync.Mutex
	calls  map[string]int
	reran  map[string]bool
	period time.Duration
}

func (s *stalling) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	// Keys are <subtest>/<random>/<name>; attempts name theirs k0, k1, ...
	parts := strings.Split(req.Key, "/")
	subtest, name := strings.Join(parts[:len(parts)-2], "/"), parts[len(parts)-1]
	s.mu.Lock()
	s.calls[req.Key]++
	n := s.calls[req.Key]
	if name == "k1" {
		s.reran[subtest] = true
	}
	s.mu.Unlock()
	stallAt := 3 // RetryAfter: the third call
	if strings.Contains(subtest, "/FixedWindowRollover") {
		stallAt = 2 // the call after the two that fill the window
	}
	if name == "k0" && n == stallAt && req.Limits[0].Period == s.period {
		time.Sleep(s.period)
	}
	return s.Store.Check(ctx, req, res)
}

func TestSuiteRerunsLateChecks(t *testing.T) {
	if os.Getenv("STORETEST_MUTANT") != "" {
		return // in a child of TestSuiteCatchesBugs
	}
	var mu sync.Mutex
	reran := map[string]bool{}
	t.Cleanup(func() { // after the parallel subtests
		for _, sub := range []string{"RetryAfter/token_bucket", "RetryAfter/sliding_log", "RetryAfter/fixed_window", "FixedWindowRollover"} {
			if !reran[t.Name()+"/"+sub] {
				t.Errorf("%s passed a stalled first attempt without rerunning it (reran: %v)", sub, reran)
			}
		}
	})
	storetest.Run(t, func(t *testing.T) storetest.Subject {
		s, err := memstore.New() // real time, like Redis
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		st := &stalling{Store: s, calls: map[string]int{}, reran: map[string]bool{}, period: 500 * time.Millisecond}
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for k := range st.reran {
				reran[k] = true
			}
		})
		return storetest.Subject{Store: st, Advance: time.Sleep}
	})
}
