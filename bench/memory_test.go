package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestMemoryPerKey measures every memory contender on 20,000 keys with 5
// requests each, on a real redis-server, and holds ratewarden to issue
// 18's bounds: fixed and sliding windows within 1.15× the floor (one
// counter string with a TTL), the token bucket no larger than
// go-redis/redis_rate. Memory is counted by Redis, not timed, so the
// bounds hold on a busy machine too; the only time bound is a cap on the
// run.
func TestMemoryPerKey(t *testing.T) {
	r := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), runCap(t, 5*time.Minute))
	defer cancel()
	const keys, checks = 20_000, 2
	lim := Limit{Rate: 100, Period: time.Hour}
	cells, err := MeasureAllMemory(ctx, r, MemoryContenders(checks), MemoryKeys(keys), lim)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]MemoryCell{}
	for _, c := range cells {
		if c.Stored != keys {
			t.Errorf("%s (%d requests per key): %d keys stored, want %d", c.Name, c.Checks, c.Stored, keys)
		}
		if c.Bytes <= 0 {
			t.Errorf("%s: used_memory grew by %d", c.Name, c.Bytes)
		}
		if _, dup := by[c.Name]; !dup {
			by[c.Name] = c
		}
	}
	floor := by[MemFloor].PerKey()
	for _, n := range []string{MemFixed, MemSliding} {
		if got := by[n].PerKey(); got > 1.15*floor {
			t.Errorf("%s: %.1f bytes per key, over 1.15× the floor's %.1f", n, got, floor)
		}
	}
	if tb, rr := by[MemToken].PerKey(), by[RedisRate].PerKey(); tb > rr {
		t.Errorf("token_bucket: %.1f bytes per key, more than redis_rate's %.1f", tb, rr)
	}
	var out bytes.Buffer
	MemoryMarkdown(&out, cells, lim)
	if !strings.Contains(out.String(), "A sliding-log entry costs") || strings.Count(out.String(), "\n| ") != len(cells)+1 {
		t.Errorf("table:\n%s", out.String())
	}
	t.Log(out.String())
}
