package memstore_test

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// stateOverhead is the per-state cost beyond the key's bytes that the
// package doc and docs/performance.md state ("about 200 bytes").
const stateOverhead = 200

// heap returns HeapInuse and HeapAlloc after a full collection (runtime.GC
// also finishes sweeping, so HeapAlloc is then the live heap).
func heap() (inuse, live int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.HeapAlloc)
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// keyOf returns a distinct key of exactly n bytes (n >= 8) for i, in a
// fresh string.
func keyOf(i, n int) string {
	p := strconv.Itoa(i) + ":"
	return p + strings.Repeat("k", n-len(p))
}

func TestMaxKeyBytes(t *testing.T) {
	for _, limit := range []int{memstore.DefaultMaxKeyBytes, 1, 40} {
		t.Run(strconv.Itoa(limit), func(t *testing.T) {
			var opts []memstore.Option
			if limit != memstore.DefaultMaxKeyBytes {
				opts = append(opts, memstore.WithMaxKeyBytes(limit))
			}
			s, l := newStore(t, opts...)
			lim := ratewarden.PerHour(5)
			atCap, over := strings.Repeat("a", limit), strings.Repeat("a", limit+1)

			if r := allow(t, l, atCap, lim); !r.Allowed || r.Remaining != 4 {
				t.Fatalf("key of %d bytes (the limit): %+v, want admitted with 4 left", limit, r)
			}
			if n := s.Len(); n != 1 {
				t.Fatalf("Len = %d after one check, want 1", n)
			}
			wantErr := fmt.Sprintf("memstore: key is %d bytes, longer than the %d-byte limit (WithMaxKeyBytes): invalid key", limit+1, limit)
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ratewarden.ErrInvalidKey) || err.Error() != wantErr {
					t.Errorf("%s on a key of %d bytes: %v, want %q", what, limit+1, err, wantErr)
				}
			}
			_, err := l.Allow(ctx, over, lim)
			check("Allow", err)
			_, err = l.Peek(ctx, over, lim)
			check("Peek", err)
			_, err = l.AllowAll(ctx, over, 1, lim, ratewarden.PerMinute(5))
			check("AllowAll", err)
			check("Limiter.Reset", l.Reset(ctx, over, lim))
			res := make([]ratewarden.Result, 1)
			check("Store.Check", s.Check(ctx, &ratewarden.Request{Key: over, Limits: []ratewarden.Limit{lim}, Cost: 1}, res))
			check("Store.Reset", s.Reset(ctx, over, lim))
			if n := s.Len(); n != 1 {
				t.Fatalf("Len = %d after refused keys, want 1 (nothing stored)", n)
			}
			if got := remaining(t, l, atCap, lim); got != 4 {
				t.Fatalf("key at the limit: remaining %d after the refused calls, want 4 (untouched)", got)
			}
			if err := l.Reset(ctx, atCap, lim); err != nil {
				t.Fatalf("Reset of a key at the limit: %v", err)
			}
			if n := s.Len(); n != 0 {
				t.Fatalf("Len = %d after Reset, want 0", n)
			}
		})
	}
}

// TestLongKeysStoreNothing: 2000 checks with distinct 60 KB keys (what an
// unauthenticated caller of the in-memory service could send) are refused
// and leave the heap about where it was; kept, they would be 120 MB.
func TestLongKeysStoreNothing(t *testing.T) {
	const keys, size = 2000, 60 << 10
	s, l := newStore(t)
	lims := []ratewarden.Limit{ratewarden.PerHour(5), {Algorithm: ratewarden.SlidingLog, Rate: 10_000, Period: ratewarden.MaxPeriod}}
	inuse0, _ := heap()
	for i := range keys {
		k := keyOf(i, size)
		if _, err := l.AllowAll(ctx, k, 1, lims...); !errors.Is(err, ratewarden.ErrInvalidKey) {
			t.Fatalf("key %d (%d bytes): %v, want ErrInvalidKey", i, len(k), err)
		}
		if err := l.Reset(ctx, k, lims...); !errors.Is(err, ratewarden.ErrInvalidKey) {
			t.Fatalf("Reset of key %d: %v, want ErrInvalidKey", i, err)
		}
	}
	inuse1, _ := heap()
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
	t.Logf("%d checks and resets of distinct %d-byte keys, refused: HeapInuse %+d bytes", keys, size, inuse1-inuse0)
	if grew := inuse1 - inuse0; grew >= 10<<20 {
		t.Fatalf("HeapInuse grew by %s over %d checks of distinct %d-byte keys (from %s to %s), want < 10 MB",
			mb(grew), keys, size, mb(inuse0), mb(inuse1))
	}
	runtime.KeepAlive(s)
}

// TestMemoryBound fills a store of WithMaxKeys states with keys of the
// default WithMaxKeyBytes, twice over (the second half evicts), and holds
// the heap to the documented bound MaxKeys × (MaxKeyBytes + 200 B): the
// live heap within it and 10% ("about"; measured 0.98 times it), the heap
// in use (which also counts the gaps freed temporary strings leave in the
// allocator's spans) within 2.5 times. Each key is sliced from a 4 KiB
// string, which the store must not keep alive: that alone would cost
// 4 KiB a state.
func TestMemoryBound(t *testing.T) {
	const maxKeys, keyBytes = 5000, memstore.DefaultMaxKeyBytes
	s, l := newStore(t, memstore.WithMaxKeys(maxKeys))
	lims := []ratewarden.Limit{
		{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Hour},
		{Algorithm: ratewarden.SlidingLog, Rate: 10, Period: 2 * time.Hour},
	}
	bound := int64(maxKeys * (keyBytes + stateOverhead))
	inuse0, live0 := heap()
	for i := range maxKeys { // two states a check: 2 × MaxKeys states
		k := keyOf(i, 4*keyBytes)[:keyBytes]
		if d, err := l.AllowAll(ctx, k, 1, lims...); err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v, %v", i, d, err)
		}
	}
	inuse1, live1 := heap()
	n := s.Len()
	if n > maxKeys || n < maxKeys*9/10 {
		t.Fatalf("Len = %d, want nearly %d (full) and at most that", n, maxKeys)
	}
	t.Logf("%d states of %d-byte keys: live heap +%s, heap in use +%s; documented bound %s", n, keyBytes, mb(live1-live0), mb(inuse1-inuse0), mb(bound))
	if grew := live1 - live0; grew > bound*11/10 {
		t.Errorf("live heap (HeapAlloc) grew by %s for %d states of %d-byte keys, want <= the documented %d × (%d + %d) B and 10%% = %s",
			mb(grew), n, keyBytes, maxKeys, keyBytes, stateOverhead, mb(bound*11/10))
	}
	if grew := inuse1 - inuse0; grew > bound*5/2 {
		t.Errorf("HeapInuse grew by %s for %d states of %d-byte keys, want <= 2.5 × the documented %d × (%d + %d) B = %s",
			mb(grew), n, keyBytes, maxKeys, keyBytes, stateOverhead, mb(bound*5/2))
	}
	runtime.KeepAlive(s)
}
