package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

var ctx = context.Background()

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		opts []memstore.Option
		want string
	}{
		{"nil option", []memstore.Option{memstore.WithShards(4), nil}, "memstore: option 1 is nil"},
		{"nil clock", []memstore.Option{memstore.WithClock(nil)}, "memstore: clock must not be nil"},
		{"zero max keys", []memstore.Option{memstore.WithMaxKeys(0)}, "memstore: max keys must be >= 1, got 0"},
		{"negative max keys", []memstore.Option{memstore.WithMaxKeys(-5)}, "memstore: max keys must be >= 1, got -5"},
		{"zero max key bytes", []memstore.Option{memstore.WithMaxKeyBytes(0)}, "memstore: max key bytes must be >= 1, got 0"},
		{"negative max key bytes", []memstore.Option{memstore.WithMaxKeyBytes(-1)}, "memstore: max key bytes must be >= 1, got -1"},
		{"zero shards", []memstore.Option{memstore.WithShards(0)}, "memstore: shards must be between 1 and 65536, got 0"},
		{"too many shards", []memstore.Option{memstore.WithShards(memstore.MaxShards + 1)}, "memstore: shards must be between 1 and 65536, got 65537"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := memstore.New(tc.opts...)
			if s != nil || !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("New: %v, %v; want nil and an ErrInvalidConfig starting %q", s, err, tc.want)
			}
		})
	}
	for _, n := range []int{1, 3, 64, memstore.MaxShards} {
		if _, err := memstore.New(memstore.WithShards(n), memstore.WithMaxKeys(2)); err != nil {
			t.Errorf("WithShards(%d): %v", n, err)
		}
	}
}

// newStore returns a Store on time.Now (the fake clock, in a bubble) and
// a Limiter on it.
func newStore(t *testing.T, opts ...memstore.Option) (*memstore.Store, *ratewarden.Limiter) {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := ratewarden.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

func allow(t *testing.T, l *ratewarden.Limiter, key string, lim ratewarden.Limit) ratewarden.Result {
	t.Helper()
	r, err := l.Allow(ctx, key, lim)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func remaining(t *testing.T, l *ratewarden.Limiter, key string, lim ratewarden.Limit) int64 {
	t.Helper()
	r, err := l.Peek(ctx, key, lim)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

func TestMaxKeysBound(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, l := newStore(t, memstore.WithMaxKeys(100), memstore.WithShards(4))
		lim := ratewarden.PerHour(5)
		for i := range 10_000 {
			k := fmt.Sprintf("attacker-%d", i)
			allow(t, l, k, lim)
			if n := s.Len(); n > 100 {
				t.Fatalf("after %d keys: Len = %d, want <= 100", i+1, n)
			}
			// The state just written is kept.
			if got := remaining(t, l, k, lim); got != 4 {
				t.Fatalf("key %d just written: remaining %d, want 4", i, got)
			}
		}
		if n := s.Len(); n < 90 {
			t.Fatalf("Len = %d, want the store nearly full (about 100)", n)
		}
	})
}

func TestEvictsExpiredFirst(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, l := newStore(t, memstore.WithMaxKeys(10), memstore.WithShards(1))
		hour := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 5, Period: time.Hour}
		second := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Second}
		for i := range 5 {
			allow(t, l, fmt.Sprint("keep-", i), hour)
			allow(t, l, fmt.Sprint("short-", i), second)
		}
		time.Sleep(2 * time.Second)
		// New keys expire sooner than the hour keys, so whatever the sample,
		// a victim is either expired or one of them.
		for i := range 5 {
			allow(t, l, fmt.Sprint("new-", i), second)
		}
		if n := s.Len(); n > 10 {
			t.Fatalf("Len = %d, want <= 10", n)
		}
		for i := range 5 {
			if got := remaining(t, l, fmt.Sprint("keep-", i), hour); got != 4 {
				t.Errorf("keep-%d: remaining %d, want 4 (state kept)", i, got)
			}
		}
	})
}

func TestEvictsClosestToExpiry(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		_, l := newStore(t, memstore.WithMaxKeys(3), memstore.WithShards(1))
		hour, minute, second := ratewarden.PerHour(2), ratewarden.PerMinute(2), ratewarden.PerSecond(2)
		allow(t, l, "a", hour)
		allow(t, l, "b", minute)
		allow(t, l, "c", second)
		allow(t, l, "d", hour)
		for _, c := range []struct {
			key  string
			lim  ratewarden.Limit
			want int64
		}{{"a", hour, 1}, {"b", minute, 1}, {"c", second, 2}, {"d", hour, 1}} {
			if got := remaining(t, l, c.key, c.lim); got != c.want {
				t.Errorf("%s: remaining %d, want %d", c.key, got, c.want)
			}
		}
	})
}

func TestMultiLimitNotEvictingItself(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		// One key with more limits than the store holds: a check must not
		// evict the state it has just written for its own key.
		s, l := newStore(t, memstore.WithMaxKeys(1), memstore.WithShards(1))
		a, b := ratewarden.PerMinute(3), ratewarden.PerHour(3)
		d, err := l.AllowAll(ctx, "k", 1, a, b)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowAll: %+v, %v", d, err)
		}
		if got := remaining(t, l, "k", a); got != 2 {
			t.Errorf("limit a: remaining %d, want 2", got)
		}
		if got := remaining(t, l, "k", b); got != 2 {
			t.Errorf("limit b: remaining %d, want 2", got)
		}
		if n := s.Len(); n != 2 {
			t.Errorf("Len = %d, want 2 (over the bound by the one key's own states)", n)
		}
	})
}

// TestMultiLimitMixedStates: one check over a live state, an expired one
// and a missing one, in a full shard, consumes exactly once from each (the
// states the first pass found are the ones the second writes), and a
// denied check consumes from none.
func TestMultiLimitMixedStates(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, l := newStore(t, memstore.WithMaxKeys(4), memstore.WithShards(1))
		a := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Second}
		b := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Hour}
		c := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 3, Period: time.Minute}
		if d, err := l.AllowAll(ctx, "k", 1, a, b); err != nil || !d.Allowed {
			t.Fatalf("first AllowAll: %+v, %v", d, err)
		}
		allow(t, l, "o1", ratewarden.PerHour(3))
		allow(t, l, "o2", ratewarden.PerHour(3))
		time.Sleep(time.Second) // a's window, and its state, ends
		d, err := l.AllowAll(ctx, "k", 1, a, b, c)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowAll over expired, live and missing states: %+v, %v", d, err)
		}
		for i, want := range []int64{2, 1, 2} {
			if got := d.Results[i].Remaining; got != want {
				t.Errorf("limit %d: remaining %d, want %d", i, got, want)
			}
		}
		if d, err := l.AllowAll(ctx, "k", 2, a, b, c); err != nil || d.Allowed {
			t.Fatalf("AllowAll of 2 with 1 left under b: %+v, %v; want denied", d, err)
		}
		for i, lim := range []ratewarden.Limit{a, b, c} {
			if got, want := remaining(t, l, "k", lim), []int64{2, 1, 2}[i]; got != want {
				t.Errorf("limit %d after the denied check: remaining %d, want %d", i, got, want)
			}
		}
		if n := s.Len(); n != 4 {
			t.Errorf("Len = %d, want the bound, 4 (one other key evicted)", n)
		}
	})
}

func TestExpiredReclaimed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, l := newStore(t, memstore.WithShards(1))
		lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Second}
		allow(t, l, "on-access", lim)
		for i := range 100 {
			allow(t, l, fmt.Sprint("old-", i), lim)
		}
		if n := s.Len(); n != 101 {
			t.Fatalf("Len = %d, want 101", n)
		}
		time.Sleep(time.Second)
		// Lazily, on access: the expired state is dropped, not carried.
		if got := remaining(t, l, "on-access", lim); got != 1 {
			t.Fatalf("remaining %d, want 1", got)
		}
		if n := s.Len(); n != 100 {
			t.Fatalf("after touching an expired key: Len = %d, want 100", n)
		}
		// By the sweep on insert: 1000 new keys check 2000 states on the way.
		for i := range 1000 {
			allow(t, l, fmt.Sprint("new-", i), ratewarden.PerHour(1))
		}
		if n := s.Len(); n > 1050 {
			t.Fatalf("after 1000 inserts: Len = %d, want most of the 100 expired states swept (<= 1050)", n)
		}
	})
}

func TestClose(t *testing.T) {
	s, l := newStore(t)
	allow(t, l, "k", ratewarden.PerSecond(1))
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len after Close = %d, want 0", n)
	}
	if _, err := l.Allow(ctx, "k", ratewarden.PerSecond(1)); !errors.Is(err, ratewarden.ErrStoreUnavailable) || !strings.HasPrefix(err.Error(), "memstore: store is closed: ") {
		t.Fatalf("Allow after Close: %v, want ErrStoreUnavailable", err)
	}
	if err := s.Reset(ctx, "k", ratewarden.PerSecond(1)); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Fatalf("Reset after Close: %v, want ErrStoreUnavailable", err)
	}
}

// TestBadInputChangesNothing: the Limiter validates every request before
// the Store sees it (Check relies on that and does not validate again), so
// bad input is an error and stores no state.
func TestBadInputChangesNothing(t *testing.T) {
	s, l := newStore(t)
	good := ratewarden.PerSecond(2)
	tests := []struct {
		name   string
		key    string
		limits []ratewarden.Limit
		cost   int64
		want   error
	}{
		{"empty key", "", []ratewarden.Limit{good}, 1, ratewarden.ErrInvalidKey},
		{"no limits", "k", nil, 1, ratewarden.ErrInvalidLimit},
		{"zero period", "k", []ratewarden.Limit{{Rate: 1}}, 1, ratewarden.ErrInvalidLimit},
		{"negative cost", "k", []ratewarden.Limit{good}, -1, ratewarden.ErrInvalidCost},
		{"cost over capacity", "k", []ratewarden.Limit{good}, 3, ratewarden.ErrInvalidCost},
		{"same scope twice", "k", []ratewarden.Limit{good, ratewarden.PerSecond(5)}, 1, ratewarden.ErrInvalidLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := l.AllowAll(ctx, tc.key, tc.cost, tc.limits...); !errors.Is(err, tc.want) {
				t.Fatalf("AllowAll: %v, want %v", err, tc.want)
			}
		})
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after rejected checks, want 0", n)
	}
}

// TestNoAllocs: a decision on an existing key through the Limiter does not
// allocate.
func TestNoAllocs(t *testing.T) {
	for _, alg := range []ratewarden.Algorithm{ratewarden.SlidingWindow, ratewarden.FixedWindow, ratewarden.TokenBucket, ratewarden.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				_, l := newStore(t)
				lim := ratewarden.Limit{Algorithm: alg, Rate: 100, Period: time.Second}
				key := "existing"
				// 200 calls a second against 100: half admitted, and the state
				// (for SlidingLog, its array) reaches its steady size in warm-up.
				var err error
				step := func() {
					time.Sleep(5 * time.Millisecond)
					_, err = l.Allow(ctx, key, lim)
				}
				for range 500 {
					step()
				}
				allocs := testing.AllocsPerRun(1000, step)
				if err != nil {
					t.Fatal(err)
				}
				if allocs != 0 {
					t.Fatalf("Allow on an existing key: %v allocations per call, want 0", allocs)
				}
			})
		})
	}
}

// TestConcurrentMixed runs checks, resets and Len on many keys at once (for
// the race detector) and then checks the counts are exact. In the bubble
// the clock stands still while the goroutines work, so no window boundary
// can fall inside the test.
func TestConcurrentMixed(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, l := newStore(t, memstore.WithShards(4))
		lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 50, Period: time.Hour}
		other := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 50, Period: time.Hour}
		var wg sync.WaitGroup
		var admitted [8]atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range 200 {
					key := fmt.Sprint("key-", i%8)
					d, err := l.AllowAll(ctx, key, 1, lim, other)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted[i%8].Add(1)
					}
					if i%50 == 0 {
						_ = l.Reset(ctx, fmt.Sprint("scratch-", g), lim)
						_ = s.Len()
					}
				}
			})
		}
		wg.Wait()
		for k := range 8 {
			key := fmt.Sprint("key-", k)
			if got := admitted[k].Load(); got != 50 {
				t.Errorf("%s: admitted %d of 200, want exactly 50", key, got)
			}
			if got := remaining(t, l, key, lim); got != 0 {
				t.Errorf("%s: remaining %d, want 0 (8×25 checks against 50)", key, got)
			}
			if got := remaining(t, l, key, other); got != 0 {
				t.Errorf("%s other: remaining %d, want 0", key, got)
			}
		}
	})
}

// TestNoAllocsRealClock: the same on the store's own clock, outside a
// bubble, where it reads the monotonic clock between bases.
func TestNoAllocsRealClock(t *testing.T) {
	for _, alg := range []ratewarden.Algorithm{ratewarden.SlidingWindow, ratewarden.FixedWindow, ratewarden.TokenBucket, ratewarden.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			_, l := newStore(t)
			lim := ratewarden.Limit{Algorithm: alg, Rate: 100, Period: time.Hour}
			var err error
			step := func() { _, err = l.Allow(ctx, "existing", lim) }
			for range 200 { // 100 admitted (the log at its size), then denials
				step()
			}
			allocs := testing.AllocsPerRun(1000, step)
			if err != nil {
				t.Fatal(err)
			}
			if allocs != 0 {
				t.Fatalf("Allow on an existing key: %v allocations per call, want 0", allocs)
			}
		})
	}
}
