package clustertest

// Named to sort last: this test kills the Sentinel deployment's primary and
// leaves the deployment ready again (old primary back as a replica).

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/ratewarden/ratewarden/redisstore"
)

// TestSentinelFailoverUnderLoad kills the primary of the Sentinel
// deployment while 16 goroutines check keys through fallback
// (LocalFallback): callers see no error, decisions degrade while the
// sentinels agree on a new primary, and come from Redis again once the
// client has followed them to it.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	old, err := sentinel.Primary()
	if err != nil {
		t.Fatal(err)
	}
	raw := store(t, client(t, sentinelURL()), redisstore.WithDenyCache(0))
	fb, err := fallback.New(raw, outageOptions...)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratewarden.New(fb)
	if err != nil {
		t.Fatal(err)
	}

	var (
		calls, degraded, errs atomic.Int64
		afterPromotion        atomic.Int64 // decisions by Redis after the promotion
		promoted, stop        atomic.Bool
		firstErr              sync.Once
	)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				time.Sleep(time.Millisecond)
				k := "sentinel:" + strconv.Itoa((w*7+i)%64)
				r, err := lim.Allow(ctx, k, neverOver)
				calls.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.Do(func() { t.Errorf("Allow(%s): %v", k, err) })
				case r.Degraded():
					degraded.Add(1)
				case promoted.Load():
					afterPromotion.Add(1)
				}
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	testredis.WaitFor(t, failoverCap, func() string { // traffic before the kill
		if n := calls.Load(); n < 100 {
			return fmt.Sprintf("%d of 100 calls before the kill", n)
		}
		return ""
	})
	if n := degraded.Load(); n != 0 {
		t.Fatalf("%d decisions degraded before the kill", n)
	}
	killed := time.Now()
	old.Kill()
	t.Cleanup(func() {
		old.Restart(t)
		if err := sentinel.WaitReady(60 * time.Second); err != nil {
			t.Errorf("the Sentinel deployment did not settle after the test: %v", err)
		}
	})
	np, err := sentinel.WaitPromoted(old, failoverCap)
	if err != nil {
		t.Fatal(err)
	}
	promotedIn := time.Since(killed)
	promoted.Store(true)
	testredis.WaitFor(t, failoverCap, func() string {
		if afterPromotion.Load() == 0 {
			return "decisions not back on Redis since the promotion"
		}
		return ""
	})
	backIn := time.Since(killed)
	stop.Store(true)
	wg.Wait()
	t.Logf("primary %s killed; %s promoted after %v; decisions from Redis again after %v; %d calls, %d degraded, %d errors",
		old.Addr, np.Addr, promotedIn.Round(time.Millisecond), backIn.Round(time.Millisecond), calls.Load(), degraded.Load(), errs.Load())
	if degraded.Load() == 0 {
		t.Error("no decision was degraded: the kill was not felt, the test proves nothing")
	}
}

// outageOptions make a fallback that keeps limits during an outage and
// degrades only on real failures: no healthy call takes 5 s, even under
// -race on a heavily loaded machine (a dead node fails calls at once,
// whatever the deadline).
var outageOptions = []fallback.Option{
	fallback.WithPolicy(fallback.LocalFallback),
	fallback.WithTimeout(5 * time.Second),
	fallback.WithLogger(slog.New(slog.DiscardHandler)),
}

// neverOver is a limit the failover tests' traffic never reaches, so every
// decision is an admission and its Source alone tells who decided.
var neverOver = ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1_000_000, Period: time.Hour}
