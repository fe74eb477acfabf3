package denycache

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/memstore"
)

var fw = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Minute}

func TestNewRejectsBadConfig(t *testing.T) {
	m, _ := memstore.New()
	for _, tc := range []struct {
		name  string
		inner ratewarden.Store
		opts  []Option
		field string
	}{
		{"nil inner", nil, nil, "inner store"},
		{"nil option", m, []Option{WithMaxEntries(5), nil}, "denycache: option 1 is nil"},
		{"zero entries", m, []Option{WithMaxEntries(0)}, "max entries"},
		{"negative entries", m, []Option{WithMaxEntries(-5)}, "max entries"},
	} {
		s, err := New(tc.inner, tc.opts...)
		if s != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: New = %v, %v; want ErrInvalidConfig naming %q", tc.name, s, err, tc.field)
		}
	}
}

// exhaust consumes all of lim for key through st.
func exhaust(t *testing.T, st ratewarden.Store, key string, lim ratewarden.Limit) {
	t.Helper()
	for range lim.Capacity() {
		if r := check(t, st, key, 1, false, lim); !r[0].Allowed {
			t.Fatalf("exhaust %s: denied early: %+v", key, r[0])
		}
	}
}

func TestDenialAnsweredLocallyUntilRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(20 * time.Second) // 40 s left in the window
		inner, s := newMem(t)
		exhaust(t, s, "k", fw)

		r := check(t, s, "k", 1, false, fw)[0]
		if r.Allowed || r.Source != ratewarden.SourceStore || r.RetryAfter != 40*time.Second {
			t.Fatalf("first denial = %+v, want the store's, RetryAfter 40s", r)
		}
		before := inner.checks.Load()
		time.Sleep(15 * time.Second)
		r = check(t, s, "k", 1, false, fw)[0]
		want := ratewarden.Result{Limit: fw, RetryAfter: 25 * time.Second, ResetAfter: 25 * time.Second, Source: ratewarden.SourceCache}
		if r != want {
			t.Errorf("cached denial = %+v, want %+v", r, want)
		}
		// A larger cost and a peek are covered too.
		if r := check(t, s, "k", 3, false, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("cost 3 = %+v, want a cached denial", r)
		}
		if r := check(t, s, "k", 1, true, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("peek = %+v, want a cached denial", r)
		}
		if n := inner.checks.Load() - before; n != 0 {
			t.Errorf("covered checks reached the store %d times", n)
		}

		// One nanosecond before the window ends: still denied locally. At the
		// end: the store decides, and admits.
		time.Sleep(25*time.Second - time.Nanosecond)
		if r := check(t, s, "k", 1, false, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache || r.RetryAfter != 1 {
			t.Errorf("1ns before = %+v, want a cached denial with RetryAfter 1ns", r)
		}
		time.Sleep(time.Nanosecond)
		if r := check(t, s, "k", 1, false, fw)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("at RetryAfter = %+v, want the store's admission", r)
		}
	})
}

// The tests below run in a bubble too: on its clock no window ends while
// they run.
func TestSmallerCostGoesToStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, s := newMem(t)
		check(t, s, "k", 2, false, fw) // 1 left
		if r := check(t, s, "k", 2, false, fw)[0]; r.Allowed {
			t.Fatalf("cost 2 with 1 left admitted: %+v", r)
		}
		before := inner.checks.Load()
		if r := check(t, s, "k", 1, false, fw)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("cost 1 after a denial of 2 = %+v, want the store's admission", r)
		}
		if r := check(t, s, "k", 2, false, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("cost 2 again = %+v, want a cached denial", r)
		}
		if n := inner.checks.Load() - before; n != 1 {
			t.Errorf("store saw %d checks, want 1 (the cost 1)", n)
		}
	})
}

func TestCostZeroAlwaysGoesToStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, s := newMem(t)
		exhaust(t, s, "k", fw)
		check(t, s, "k", 1, false, fw) // remembered
		before := inner.checks.Load()
		for _, peek := range []bool{false, true} {
			if r := check(t, s, "k", 0, peek, fw)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
				t.Errorf("cost 0 (peek %v) = %+v, want the store's admission", peek, r)
			}
		}
		if n := inner.checks.Load() - before; n != 2 {
			t.Errorf("store saw %d checks of cost 0, want 2", n)
		}
	})
}

func TestOtherRateIsNotCovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, s := newMem(t)
		exhaust(t, s, "k", fw)
		check(t, s, "k", 1, false, fw)
		wider := fw
		wider.Rate = 5 // same scope, so the same counter, with more room
		before := inner.checks.Load()
		if r := check(t, s, "k", 1, false, wider)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("wider limit = %+v, want the store's admission", r)
		}
		if n := inner.checks.Load() - before; n != 1 {
			t.Errorf("store saw %d checks, want 1", n)
		}
	})
}

func TestMultiLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, s := newMem(t)
		perSec := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Second}
		exhaust(t, s, "k", fw)
		res := check(t, s, "k", 1, false, perSec, fw)
		if res[0].Allowed != true || res[1].Allowed || res[1].Source != ratewarden.SourceStore {
			t.Fatalf("multi = %+v, want the store's denial by the fixed window", res)
		}
		// A multi-limit check always goes to the store: the cache does not know
		// the token bucket's state, and its Result must report it.
		before := inner.checks.Load()
		res = check(t, s, "k", 1, false, perSec, fw)
		if res[1].Allowed || res[1].Source != ratewarden.SourceStore || !res[0].Allowed || res[0].Remaining != 10 {
			t.Errorf("multi again = %+v, want the store's exact answer", res)
		}
		if n := inner.checks.Load() - before; n != 1 {
			t.Errorf("store saw %d checks, want 1", n)
		}
		// The denial it learned answers a single-limit check of the fixed window.
		before = inner.checks.Load()
		if r := check(t, s, "k", 1, false, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache || r.RetryAfter <= 0 {
			t.Errorf("single fixed window = %+v, want a cached denial", r)
		}
		if n := inner.checks.Load() - before; n != 0 {
			t.Errorf("store saw %d checks, want 0", n)
		}
		// Nothing was consumed from the token bucket by the denied checks.
		if r := check(t, s, "k", 0, true, perSec)[0]; r.Remaining != 10 {
			t.Errorf("token bucket remaining = %d, want 10", r.Remaining)
		}
	})
}

func TestResetDropsEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, s := newMem(t)
		other := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1, Period: time.Hour}
		exhaust(t, s, "k", fw)
		exhaust(t, s, "k", other)
		check(t, s, "k", 1, false, fw)
		check(t, s, "k", 1, false, other)
		if err := s.Reset(bg, "k", fw); err != nil {
			t.Fatal(err)
		}
		if r := check(t, s, "k", 1, false, fw)[0]; !r.Allowed {
			t.Errorf("after Reset = %+v, want admitted", r)
		}
		if r := check(t, s, "k", 1, false, other)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("other limit after Reset of fw = %+v, want still a cached denial", r)
		}
	})
}

// A Reset through another replica is not seen: this one keeps denying
// costs it has seen denied until RetryAfter (the documented limitation);
// smaller costs still go to the store, which admits them.
func TestResetElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner, s := newMem(t) // at the start of a window
		exhaust(t, s, "k", fw)
		check(t, s, "k", 2, false, fw)
		if err := inner.Reset(bg, "k", fw); err != nil { // the other replica
			t.Fatal(err)
		}
		if r := check(t, s, "k", 2, false, fw)[0]; r.Allowed || r.Source != ratewarden.SourceCache {
			t.Errorf("after a Reset elsewhere = %+v, want the (stale) cached denial", r)
		}
		if r := check(t, s, "k", 1, false, fw)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("cost 1 = %+v, want the store's admission", r)
		}
		time.Sleep(time.Minute)
		if r := check(t, s, "k", 2, false, fw)[0]; !r.Allowed || r.Source != ratewarden.SourceStore {
			t.Errorf("cost 2 after RetryAfter = %+v, want the store's admission", r)
		}
	})
}

func TestDegradedNotRemembered(t *testing.T) {
	down, _ := memstore.New()
	_ = down.Close()
	fb, err := fallback.New(down, fallback.WithPolicy(fallback.FailClosed), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	inner := &counting{Store: fb}
	s, err := New(inner)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r := check(t, s, "k", 1, false, fw)[0]
		if r.Allowed || r.Source != ratewarden.SourceFailClosed {
			t.Fatalf("check %d = %+v, want fail_closed", i, r)
		}
	}
	if n := inner.checks.Load(); n != 3 {
		t.Errorf("inner saw %d checks, want 3 (degraded denials are not remembered)", n)
	}
	if n := s.Len(); n != 0 {
		t.Errorf("Len = %d, want 0", n)
	}
}

func TestBoundedEntries(t *testing.T) {
	_, s := newMem(t, WithMaxEntries(50))
	one := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: time.Hour}
	for i := range 2000 {
		key := "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String()
		check(t, s, key, 1, false, one)
		check(t, s, key, 1, false, one) // denied: remembered
		if n := s.Len(); n > 50 {
			t.Fatalf("after %d keys Len = %d, want <= 50", i+1, n)
		}
	}
}
