package fallback

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

// shardedStore is a real memstore whose keys starting with "down" fail, as
// the keys of a failed Redis Cluster primary do while the others answer.
type shardedStore struct{ *memstore.Store }

func (s shardedStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if strings.HasPrefix(req.Key, "down") {
		return fmt.Errorf("sharded: connection refused: %w", ratewarden.ErrStoreUnavailable)
	}
	return s.Store.Check(ctx, req, res)
}

func byPrefix(key string) int {
	if strings.HasPrefix(key, "down") {
		return 0
	}
	return 1
}

// A failed partition trips its own breaker only: keys of the other
// partition keep being decided by the primary.
func TestPartitionedIsolatesAFailedPartition(t *testing.T) {
	m, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPartitioned(shardedStore{m}, 2, byPrefix, WithPolicy(LocalFallback), WithTripAfter(3), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if r := mustCheck(t, p, fmt.Sprintf("down%d", i), perMin10, 1); r.Source != ratewarden.SourceLocalFallback {
			t.Fatalf("key on the failed partition: %+v, want local_fallback", r)
		}
		if r := mustCheck(t, p, fmt.Sprintf("up%d", i), perMin10, 1); r.Source != ratewarden.SourceStore {
			t.Fatalf("key on the healthy partition: %+v, want the store's answer", r)
		}
	}
	if got := p.States(); got[0] != StateOpen || got[1] != StateClosed {
		t.Errorf("States() = %v, want [open closed]", got)
	}
	if got := p.State(); got != StateOpen {
		t.Errorf("State() = %v, want open (the worst partition)", got)
	}
	if err := p.Reset(context.Background(), "up1", perMin10); err != nil {
		t.Errorf("Reset on the healthy partition: %v", err)
	}
	if err := p.Reset(context.Background(), "down1", perMin10); !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Errorf("Reset on the failed partition: %v, want ErrStoreUnavailable", err)
	}
}

func TestPartitionedConfig(t *testing.T) {
	m, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    int
		fn   func(string) int
		opts []Option
		want string
	}{
		{0, byPrefix, nil, "fallback: partitions must be >= 1, got 0"},
		{2, nil, nil, "fallback: partition function must not be nil"},
		{2, byPrefix, []Option{WithTimeout(-time.Second)}, "fallback: timeout must be > 0"},
	} {
		if _, err := NewPartitioned(m, tc.n, tc.fn, tc.opts...); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("NewPartitioned(%d, ...): %v, want %q", tc.n, err, tc.want)
		}
	}
	p, err := NewPartitioned(m, 2, func(string) int { return 2 })
	if err != nil {
		t.Fatal(err)
	}
	res := make([]ratewarden.Result, 1)
	err = p.Check(context.Background(), &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perMin10}, Cost: 1}, res)
	if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "partition 2 of 2") {
		t.Errorf("a partition out of range: %v", err)
	}
}
