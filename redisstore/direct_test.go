package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// calmDirect warms s until its evaluator is calm and has a dedicated
// connection parked (a lone caller needs only one), and returns the
// evaluator.
func calmDirect(t *testing.T, s *Store) *rueidisEval {
	t.Helper()
	ev := s.ev.(*rueidisEval)
	if ev.direct == nil {
		t.Fatal("no dedicated connections on a standalone client")
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Hour}
	for i := 0; ev.calm.Load() < calmAfter; i++ {
		if _, err := check(s, "warm:"+strconv.Itoa(i), lim, 1); err != nil {
			t.Fatalf("warm-up check %d: %v", i, err)
		}
	}
	testredis.WaitFor(t, 30*time.Second, func() string {
		if _, err := check(s, "warm", lim, 1); err != nil {
			return err.Error()
		}
		if ev.direct.parked.Load() == 0 {
			return "no dedicated connection parked"
		}
		return ""
	})
	return ev
}

// Once calm, a lone caller's checks and resets go out on dedicated
// connections, and decide as the pipeline does: with batching and without.
func TestDirectLoneCaller(t *testing.T) {
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{
		"batched":   openStore(t, srv.Addr),
		"unbatched": openStore(t, srv.Addr, WithBatching(false)),
	} {
		ev := calmDirect(t, s)
		lim := ratewarden.PerHour(3)
		from := ev.direct.sent.Load()
		const keys = 50
		for i := range keys {
			key := name + ":" + strconv.Itoa(i)
			for n := range 4 {
				r, err := check(s, key, lim, 1)
				if err != nil {
					t.Fatalf("%s: check %d of %s: %v", name, n, key, err)
				}
				if want := n < 3; r.Allowed != want || (want && r.Remaining != int64(2-n)) {
					t.Fatalf("%s: check %d of %s: %+v; want allowed %v with %d remaining", name, n, key, r, want, 2-n)
				}
			}
			if err := s.Reset(bg, key, lim); err != nil {
				t.Fatalf("%s: reset %s: %v", name, key, err)
			}
			if r, err := check(s, key, lim, 1); err != nil || !r.Allowed || r.Remaining != 2 {
				t.Fatalf("%s: check after reset of %s: %+v, %v; want allowed with 2 remaining", name, key, r, err)
			}
		}
		if sent, want := ev.direct.sent.Load()-from, int64(keys*6); sent != want {
			t.Errorf("%s: %d of %d lone commands went out on a dedicated connection", name, sent, want)
		}
	}
}

// Concurrent checks share the dedicated connections with the pipeline and
// stay exact: 16 callers x 100 checks on a fixed window of 500 admit 500.
func TestDirectConcurrentExact(t *testing.T) {
	srv := testredis.Start(t)
	for name, s := range map[string]*Store{
		"batched":   openStore(t, srv.Addr),
		"unbatched": openStore(t, srv.Addr, WithBatching(false)),
	} {
		ev := calmDirect(t, s)
		from := ev.direct.sent.Load()
		lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 500, Period: time.Hour}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 100 {
					r, err := check(s, name+":hot", lim, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 500 {
			t.Errorf("%s: admitted %d, want exactly 500", name, admitted.Load())
		}
		if ev.direct.sent.Load() == from {
			t.Errorf("%s: no command went out on a dedicated connection", name)
		}
		t.Logf("%s: %d of the script calls on dedicated connections", name, ev.direct.sent.Load()-from)
	}
}

// On a stopped Redis, a check on a dedicated connection returns at its
// cancellation, or at its deadline (the caller's, or the Store's for a
// caller without one); the connection is dropped, the evaluator goes back
// to the pipeline until calm again, and then to dedicated connections.
func TestDirectStalledRedis(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr, WithTimeout(300*time.Millisecond))
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: ratewarden.MaxRate, Period: time.Hour}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
		min  time.Duration
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(20*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled, 20 * time.Millisecond},
		{"caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(bg, 200*time.Millisecond)
		}, context.DeadlineExceeded, 200 * time.Millisecond},
		{"store's timeout", func() (context.Context, context.CancelFunc) {
			return bg, func() {}
		}, context.DeadlineExceeded, 300 * time.Millisecond},
	} {
		ev := calmDirect(t, s)
		from, total := ev.direct.sent.Load(), ev.direct.total.Load()
		thaw := freeze(t, srv)
		ctx, cancel := tc.ctx()
		start := time.Now()
		_, err := check(s, "k", lim, 1, ctx)
		took := time.Since(start)
		cancel()
		thaw()
		if !errors.Is(err, tc.want) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Errorf("%s: %v; want %v and ErrStoreUnavailable", tc.name, err, tc.want)
		}
		// Generous for a busy machine; the connection's own close (a PING
		// to drain it) would wait 1s for a stopped Redis.
		if took < tc.min || took > tc.min+700*time.Millisecond {
			t.Errorf("%s: returned after %v; want %v and well under 1s more", tc.name, took, tc.min)
		}
		if ev.direct.sent.Load() != from+1 {
			t.Errorf("%s: the check did not go out on a dedicated connection", tc.name)
		}
		if got := ev.direct.total.Load(); got != total-1 {
			t.Errorf("%s: %d dedicated connections after the failure, want %d (the failed one dropped)", tc.name, got, total-1)
		}
		if c := ev.calm.Load(); c != 0 {
			t.Errorf("%s: calm %d after a connection error, want 0", tc.name, c)
		}
		if _, err := check(s, "after", lim, 1); err != nil {
			t.Fatalf("%s: check after thaw: %v", tc.name, err)
		}
		if ev.direct.sent.Load() != from+1 {
			t.Errorf("%s: a check right after the failure went out on a dedicated connection; want the pipeline until calm", tc.name)
		}
	}
}

// A Store's deadline for a caller without one: reported at once, ending
// the context when it passes (Err before anything waits, Done after), and
// ended early by release or by the caller's cancellation.
func TestBoundedCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Store{timeout: time.Second}
		ctx, b := s.bounded(bg)
		if d, ok := ctx.Deadline(); !ok || !d.Equal(time.Now().Add(time.Second)) {
			t.Errorf("Deadline() = %v, %v; want now + 1s", d, ok)
		}
		if ctx.Err() != nil {
			t.Errorf("Err() = %v before the deadline", ctx.Err())
		}
		time.Sleep(time.Second)
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("Err() = %v at the deadline, before any Done; want DeadlineExceeded", ctx.Err())
		}
		b.release()

		ctx, b = s.bounded(bg)
		done := ctx.Done()
		time.Sleep(999 * time.Millisecond)
		select {
		case <-done:
			t.Error("Done closed before the deadline")
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Error("Done still open at the deadline")
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("Err() = %v after Done; want DeadlineExceeded", ctx.Err())
		}
		b.release()

		ctx, b = s.bounded(bg)
		b.release()
		if _, ok := <-ctx.Done(); ok || !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("released: Err() = %v; want Done closed and Canceled", ctx.Err())
		}

		parent, cancel := context.WithCancel(bg)
		ctx, b = s.bounded(parent)
		child, stop := context.WithCancel(ctx) // hooks onto the armed context
		cancel()
		synctest.Wait()
		if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
			t.Errorf("caller's cancel: Err() = %v, child %v; want Canceled", ctx.Err(), child.Err())
		}
		stop()
		b.release()

		if c, b := s.bounded(ctx); b != nil || c != ctx {
			t.Error("a context with a deadline of its own got another")
		}
	})
}

// A queued check of a caller without a deadline leaves at the Store's
// timeout (from the timer it shares with the checks of its millisecond),
// or at its caller's cancellation, and is never sent.
func TestQueuedStoreTimeout(t *testing.T) {
	srv := testredis.Start(t)
	inner := openStore(t, srv.Addr).ev
	ev := &blockingEval{evaluator: inner, release: make(chan struct{})}
	const timeout = 200 * time.Millisecond
	s, err := storeOn(ev, WithBatchLanes(1), WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	lim := ratewarden.PerHour(1000)
	held := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		_, err := check(s, "lane", lim, 1, ctx)
		held <- err
	}()
	for ev.calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	type result struct {
		err  error
		took time.Duration
	}
	queue := func(key string, ctx context.Context) <-chan result {
		r := make(chan result, 1)
		go func() {
			start := time.Now()
			_, err := check(s, key, lim, 1, ctx)
			r <- result{err, time.Since(start)}
		}()
		return r
	}
	var timed []<-chan result
	for i := range 3 {
		timed = append(timed, queue("timed"+strconv.Itoa(i), bg))
	}
	parent, cancel := context.WithCancel(bg)
	canceled := queue("canceled", parent)
	for s.bat.queued() < 4 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	if r := <-canceled; !errors.Is(r.err, context.Canceled) || r.took >= timeout {
		t.Errorf("canceled after 20ms: %v after %v; want context.Canceled before the %v timeout", r.err, r.took, timeout)
	}
	for i, ch := range timed {
		// Generous for a busy machine; the lane is held until released
		// below, so a check that did not leave at its timeout would wait.
		if r := <-ch; !errors.Is(r.err, context.DeadlineExceeded) || !errors.Is(r.err, ratewarden.ErrStoreUnavailable) || r.took < timeout || r.took > timeout+time.Second {
			t.Errorf("queued check %d: %v after %v; want DeadlineExceeded and ErrStoreUnavailable at the %v timeout", i, r.err, r.took, timeout)
		}
	}
	close(ev.release)
	if err := <-held; err != nil {
		t.Fatalf("the lane's check: %v", err)
	}
	if c := ev.calls.Load(); c != 1 {
		t.Errorf("%d script calls, want 1: the queued checks left before a lane freed up", c)
	}
	for _, k := range []string{"timed0", "timed1", "timed2", "canceled"} {
		if n := do(t, srv, "EXISTS", s.Key(k, lim)); n != "0" {
			t.Errorf("%s reached Redis", k)
		}
	}
}
