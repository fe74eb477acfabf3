package naive

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// TestOneAtATime: without concurrency the naive counter counts right (its
// flaw is the race, not the arithmetic), its key expires, Reset clears it,
// and what it cannot do is refused.
func TestOneAtATime(t *testing.T) {
	srv := testredis.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the servers' goroutines end when they do
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := New(c, "p:")
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: time.Hour}
	admitted := 0
	for range 5 {
		r, err := lim.Allow(ctx, "k", l)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if n, err := st.Count(ctx, "k", l); err != nil || n != 3 || admitted != 3 {
		t.Fatalf("admitted %d, counter %d (%v); want 3 and 3", admitted, n, err)
	}
	ttl, err := srv.Do("PTTL", st.key("k", l))
	if ms, _ := strconv.Atoi(ttl); err != nil || ms <= 0 {
		t.Errorf("PTTL %q %v, want an expiry", ttl, err)
	}
	if err := lim.Reset(ctx, "k", l); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Count(ctx, "k", l); err != nil || n != 0 {
		t.Errorf("counter after Reset %d %v", n, err)
	}
	if _, err := lim.AllowAll(ctx, "k", 1, l, ratewarden.PerSecond(1)); !errors.Is(err, ratewarden.ErrInvalidLimit) {
		t.Errorf("two limits: %v, want ErrInvalidLimit", err)
	}
	if _, err := New(nil, ""); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
}
