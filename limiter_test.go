package ratewarden_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// countingStore counts the calls that reach the store it wraps.
type countingStore struct {
	ratewarden.Store
	checks, resets atomic.Int64
}

func (s *countingStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	s.checks.Add(1)
	return s.Store.Check(ctx, req, res)
}

func (s *countingStore) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	s.resets.Add(1)
	return s.Store.Reset(ctx, key, limits...)
}

// newCounting returns a Limiter on a counting memstore. Tests that depend
// on the time run it inside synctest.Test, where time.Now (the memstore's
// clock) stands still until the test sleeps: the bubble starts at
// 2000-01-01 00:00:00 UTC, a whole day, hour and minute.
func newCounting(t *testing.T, opts ...ratewarden.Option) (*countingStore, *ratewarden.Limiter, *memstore.Store) {
	t.Helper()
	ms, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: ms}
	l, err := ratewarden.New(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cs, l, ms
}

func TestNewErrors(t *testing.T) {
	l, err := ratewarden.New(nil)
	if l != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "store must not be nil") {
		t.Fatalf("New(nil) = %v, %v", l, err)
	}
	ms, _ := memstore.New()
	l, err = ratewarden.New(ms, ratewarden.WithObserver(nil), nil)
	if l != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Fatalf("New(store, ok, nil) = %v, %v", l, err)
	}
}

// TestBadInputNeverReachesStore: every invalid input is rejected with the
// right sentinel and a message naming the problem, and the store is not
// called.
func TestBadInputNeverReachesStore(t *testing.T) {
	ctx := context.Background()
	good := ratewarden.PerSecond(5)
	bad := ratewarden.Limit{Rate: 5}
	tests := []struct {
		name string
		call func(*ratewarden.Limiter) error
		want error
		msg  string
	}{
		{"Allow empty key", func(l *ratewarden.Limiter) error { _, err := l.Allow(ctx, "", good); return err }, ratewarden.ErrInvalidKey, "key must not be empty"},
		{"Allow invalid limit", func(l *ratewarden.Limiter) error { _, err := l.Allow(ctx, "k", bad); return err }, ratewarden.ErrInvalidLimit, "period must be > 0"},
		{"Allow zero limit", func(l *ratewarden.Limiter) error { _, err := l.Allow(ctx, "k", ratewarden.Limit{}); return err }, ratewarden.ErrInvalidLimit, "rate must be > 0"},
		{"AllowN negative", func(l *ratewarden.Limiter) error { _, err := l.AllowN(ctx, "k", good, -1); return err }, ratewarden.ErrInvalidCost, "cost must be >= 0, got -1"},
		{"AllowN over capacity", func(l *ratewarden.Limiter) error { _, err := l.AllowN(ctx, "k", good, 6); return err }, ratewarden.ErrInvalidCost, "cost 6 exceeds the capacity 5 of limit 5/1s"},
		{"AllowN empty key", func(l *ratewarden.Limiter) error { _, err := l.AllowN(ctx, "", good, 1); return err }, ratewarden.ErrInvalidKey, "key must not be empty"},
		{"Peek empty key", func(l *ratewarden.Limiter) error { _, err := l.Peek(ctx, "", good); return err }, ratewarden.ErrInvalidKey, "key must not be empty"},
		{"Peek invalid limit", func(l *ratewarden.Limiter) error { _, err := l.Peek(ctx, "k", bad); return err }, ratewarden.ErrInvalidLimit, "period must be > 0"},
		{"AllowAll no limits", func(l *ratewarden.Limiter) error { _, err := l.AllowAll(ctx, "k", 1); return err }, ratewarden.ErrInvalidLimit, "no limits given"},
		{"AllowAll empty key", func(l *ratewarden.Limiter) error { _, err := l.AllowAll(ctx, "", 1, good); return err }, ratewarden.ErrInvalidKey, "key must not be empty"},
		{"AllowAll duplicate scope", func(l *ratewarden.Limiter) error {
			_, err := l.AllowAll(ctx, "k", 1, good, ratewarden.PerMinute(9), ratewarden.PerSecond(50))
			return err
		}, ratewarden.ErrInvalidLimit, "limits[0] (5/1s) and limits[2] (50/1s) share the scope token_bucket:1s"},
		{"AllowAll invalid second limit", func(l *ratewarden.Limiter) error { _, err := l.AllowAll(ctx, "k", 1, good, bad); return err }, ratewarden.ErrInvalidLimit, "limits[1]: period must be > 0"},
		{"AllowAll cost over the smaller capacity", func(l *ratewarden.Limiter) error {
			_, err := l.AllowAll(ctx, "k", 6, ratewarden.PerMinute(100), good)
			return err
		}, ratewarden.ErrInvalidCost, "cost 6 exceeds the capacity 5"},
		{"AllowAll negative cost", func(l *ratewarden.Limiter) error { _, err := l.AllowAll(ctx, "k", -2, good); return err }, ratewarden.ErrInvalidCost, "cost must be >= 0"},
		{"Reset empty key", func(l *ratewarden.Limiter) error { return l.Reset(ctx, "", good) }, ratewarden.ErrInvalidKey, "key must not be empty"},
		{"Reset no limits", func(l *ratewarden.Limiter) error { return l.Reset(ctx, "k") }, ratewarden.ErrInvalidLimit, "no limits given"},
		{"Reset invalid limit", func(l *ratewarden.Limiter) error { return l.Reset(ctx, "k", bad) }, ratewarden.ErrInvalidLimit, "period must be > 0"},
		{"Reset duplicate scope", func(l *ratewarden.Limiter) error { return l.Reset(ctx, "k", good, good) }, ratewarden.ErrInvalidLimit, "share the scope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var observed atomic.Int64
			cs, l, _ := newCounting(t, ratewarden.WithObserver(func(string, []ratewarden.Result, error) { observed.Add(1) }))
			err := tc.call(l)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
			if n, r := cs.checks.Load(), cs.resets.Load(); n != 0 || r != 0 {
				t.Fatalf("store called %d times (Check) and %d (Reset), want never", n, r)
			}
			if n := observed.Load(); n != 0 {
				t.Fatalf("observer called %d times for rejected input, want 0", n)
			}
		})
	}
}

func TestLimiterDecisions(t *testing.T) { synctest.Test(t, testLimiterDecisions) }

func testLimiterDecisions(t *testing.T) {
	ctx := context.Background()
	cs, l, _ := newCounting(t)
	time.Sleep(250 * time.Millisecond) // a quarter second into the minute
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Minute}
	r, err := l.AllowN(ctx, "k", lim, 3)
	if err != nil || !r.Allowed || r.Remaining != 0 || r.Limit != lim || r.Source != ratewarden.SourceStore {
		t.Fatalf("AllowN(3) = %+v, %v", r, err)
	}
	r, err = l.Allow(ctx, "k", lim)
	if err != nil || r.Allowed || r.RetryAfter != 59750*time.Millisecond || r.ResetAfter != r.RetryAfter {
		t.Fatalf("Allow over = %+v, %v; want denied, retry after the window end 59.75s away (the clock is 0.25s past the minute)", r, err)
	}
	r, err = l.Peek(ctx, "k", lim)
	if err != nil || r.Allowed || r.Remaining != 0 {
		t.Fatalf("Peek = %+v, %v", r, err)
	}
	time.Sleep(r.RetryAfter)
	r, err = l.AllowN(ctx, "k", lim, 0)
	if err != nil || !r.Allowed || r.Remaining != 3 {
		t.Fatalf("AllowN(0) in the next window = %+v, %v", r, err)
	}
	if err := l.Reset(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	if n, r := cs.checks.Load(), cs.resets.Load(); n != 4 || r != 1 {
		t.Fatalf("store saw %d checks and %d resets, want 4 and 1", n, r)
	}
}

func TestStoreErrorPassedThrough(t *testing.T) {
	ctx := context.Background()
	var got []error
	_, l, ms := newCounting(t, ratewarden.WithObserver(func(key string, res []ratewarden.Result, err error) {
		if res != nil {
			t.Errorf("observer got results %v with error %v", res, err)
		}
		got = append(got, err)
	}))
	_ = ms.Close()
	r, err := l.Allow(ctx, "k", ratewarden.PerSecond(1))
	if !errors.Is(err, ratewarden.ErrStoreUnavailable) || r != (ratewarden.Result{}) {
		t.Fatalf("Allow on a closed store = %+v, %v; want the zero Result and ErrStoreUnavailable", r, err)
	}
	d, err := l.AllowAll(ctx, "k", 1, ratewarden.PerSecond(1), ratewarden.PerHour(5))
	if !errors.Is(err, ratewarden.ErrStoreUnavailable) || d.Allowed || d.Results != nil {
		t.Fatalf("AllowAll on a closed store = %+v, %v", d, err)
	}
	if err := l.Reset(ctx, "k", ratewarden.PerSecond(1)); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Fatalf("Reset on a closed store: %v", err)
	}
	if len(got) != 2 || !errors.Is(got[0], ratewarden.ErrStoreUnavailable) || !errors.Is(got[1], ratewarden.ErrStoreUnavailable) {
		t.Fatalf("observer saw %v, want two ErrStoreUnavailable (Reset is not observed)", got)
	}
}

func TestObserver(t *testing.T) {
	ctx := context.Background()
	type seen struct {
		key     string
		allowed []bool
	}
	var calls []seen
	_, l, _ := newCounting(t, ratewarden.WithObserver(func(key string, res []ratewarden.Result, err error) {
		if err != nil {
			t.Errorf("observer: %v", err)
		}
		s := seen{key: key}
		for _, r := range res {
			s.allowed = append(s.allowed, r.Allowed)
		}
		calls = append(calls, s)
	}))
	a, b := ratewarden.PerSecond(1), ratewarden.PerHour(10)
	l.Allow(ctx, "x", a)
	l.AllowN(ctx, "y", a, 1)
	l.Peek(ctx, "x", a)
	l.AllowAll(ctx, "x", 1, b, a)
	l.Reset(ctx, "x", a)
	want := []seen{{"x", []bool{true}}, {"y", []bool{true}}, {"x", []bool{false}}, {"x", []bool{true, false}}}
	if len(calls) != len(want) {
		t.Fatalf("observer called %d times (%v), want %d", len(calls), calls, len(want))
	}
	for i := range want {
		if calls[i].key != want[i].key || len(calls[i].allowed) != len(want[i].allowed) {
			t.Fatalf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
		for j := range want[i].allowed {
			if calls[i].allowed[j] != want[i].allowed[j] {
				t.Fatalf("call %d: %+v, want %+v", i, calls[i], want[i])
			}
		}
	}
	// WithObserver(nil) removes it.
	l2, err := ratewarden.New(&countingStore{Store: mustMem(t)}, ratewarden.WithObserver(func(string, []ratewarden.Result, error) {
		t.Error("removed observer called")
	}), ratewarden.WithObserver(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Allow(ctx, "k", a); err != nil {
		t.Fatal(err)
	}
}

func mustMem(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAllowAll(t *testing.T) { synctest.Test(t, testAllowAll) }

func testAllowAll(t *testing.T) {
	ctx := context.Background()
	_, l, _ := newCounting(t)
	perSec := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Second}
	perHour := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour}
	d, err := l.AllowAll(ctx, "k", 2, perSec, perHour)
	if err != nil || !d.Allowed || len(d.Results) != 2 || d.Results[0].Remaining != 0 || d.Results[1].Remaining != 8 {
		t.Fatalf("AllowAll = %+v, %v", d, err)
	}
	if b := d.Binding(); b.Limit != perSec {
		t.Fatalf("Binding = %+v, want the per-second limit (fewest remaining)", b)
	}
	d, err = l.AllowAll(ctx, "k", 1, perSec, perHour)
	if err != nil || d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed || d.Results[1].Remaining != 8 {
		t.Fatalf("AllowAll over = %+v, %v; want denied by the first, the second untouched at 8", d, err)
	}
	if b := d.Binding(); b.Limit != perSec || b.RetryAfter != 500*time.Millisecond {
		t.Fatalf("Binding = %+v, want the per-second limit retrying after 500ms", b)
	}
}

func TestDecisionBinding(t *testing.T) {
	r := func(allowed bool, rem int64, retry time.Duration, rate int64) ratewarden.Result {
		return ratewarden.Result{Allowed: allowed, Remaining: rem, RetryAfter: retry, Limit: ratewarden.PerSecond(rate)}
	}
	tests := []struct {
		name string
		d    ratewarden.Decision
		want int // index into Results, -1 for the zero Result
	}{
		{"empty", ratewarden.Decision{}, -1},
		{"one", ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{r(true, 3, 0, 1)}}, 0},
		{"allowed: fewest remaining", ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{r(true, 5, 0, 1), r(true, 2, 0, 2), r(true, 4, 0, 3)}}, 1},
		{"allowed: ties go to the first", ratewarden.Decision{Allowed: true, Results: []ratewarden.Result{r(true, 2, 0, 1), r(true, 2, 0, 2)}}, 0},
		{"denied: the denying one, not fewer remaining", ratewarden.Decision{Results: []ratewarden.Result{r(true, 0, 0, 1), r(false, 1, time.Second, 2)}}, 1},
		{"denied: longest RetryAfter", ratewarden.Decision{Results: []ratewarden.Result{r(false, 0, time.Second, 1), r(true, 9, 0, 2), r(false, 0, time.Minute, 3), r(false, 0, time.Millisecond, 4)}}, 2},
		{"denied: ties go to the first", ratewarden.Decision{Results: []ratewarden.Result{r(true, 0, 0, 1), r(false, 0, time.Second, 2), r(false, 0, time.Second, 3)}}, 1},
	}
	for _, tc := range tests {
		got := tc.d.Binding()
		var want ratewarden.Result
		if tc.want >= 0 {
			want = tc.d.Results[tc.want]
		}
		if got != want {
			t.Errorf("%s: Binding() = %+v, want %+v", tc.name, got, want)
		}
	}
}

func TestSource(t *testing.T) {
	for _, c := range []struct {
		s        ratewarden.Source
		name     string
		degraded bool
	}{
		{ratewarden.SourceStore, "store", false},
		{ratewarden.SourceCache, "cache", false},
		{ratewarden.SourceFailOpen, "fail_open", true},
		{ratewarden.SourceFailClosed, "fail_closed", true},
		{ratewarden.SourceLocalFallback, "local_fallback", true},
		{ratewarden.Source(99), "unknown", true},
	} {
		if c.s.String() != c.name || c.s.Degraded() != c.degraded || (ratewarden.Result{Source: c.s}).Degraded() != c.degraded {
			t.Errorf("Source %d: %q degraded %v, want %q %v", c.s, c.s.String(), c.s.Degraded(), c.name, c.degraded)
		}
	}
}
