package clustertest

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// TestSentinelFailoverUnderLoad kills the primary of the Sentinel
// deployment while 16 goroutines check keys through fallback
// (LocalFallback): callers see no error, decisions degrade while the
// sentinels agree on a new primary, and come from Redis again once the
// client has followed them to it, within the bounds docs/operations.md
// states. The test kills the primary, so it runs on a deployment of its
// own.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	sentinel := testredis.StartSentinel(t)
	old, err := sentinel.Primary()
	if err != nil {
		t.Fatal(err)
	}
	raw := store(t, client(t, sentinelURL(sentinel)))
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
	if promotedIn > promotionBound {
		t.Errorf("the sentinels promoted the replica %v after the kill, want <= %v (docs/operations.md)", promotedIn.Round(time.Millisecond), promotionBound)
	}
	if d := backIn - promotedIn; d > backAfterPromotionBound {
		t.Errorf("decisions from Redis again %v after the promotion, want <= %v (docs/operations.md)", d.Round(time.Millisecond), backAfterPromotionBound)
	}
}
