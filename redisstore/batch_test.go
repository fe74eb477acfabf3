package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/testredis"
)

// TestBatchingCoalescesConcurrentChecks: 64 goroutines on one key with a
// limit of 100 make far fewer script calls than checks, and still admit
// exactly 100; on many keys every check is admitted and decided.
func TestBatchingCoalescesConcurrentChecks(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	l := limiter(t, s)
	if _, err := l.Allow(bg, "warm-up", ratewarden.PerSecond(1)); err != nil { // loads the script
		t.Fatal(err)
	}
	const callers, each = 64, 50
	run := func(key func(g, i int) string, lim ratewarden.Limit) (admitted, calls int64) {
		t.Helper()
		before := scriptCalls(t, srv)
		var adm atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for g := range callers {
			wg.Go(func() {
				for i := range each {
					r, err := l.Allow(bg, key(g, i), lim)
					if err != nil {
						errs <- err
						return
					}
					if r.Allowed {
						adm.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return adm.Load(), scriptCalls(t, srv) - before
	}

	adm, calls := run(func(int, int) string { return "hot" }, ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour})
	if adm != 100 {
		t.Errorf("hot key: admitted %d of %d, want exactly 100", adm, callers*each)
	}
	if calls >= callers*each/2 {
		t.Errorf("hot key: %d script calls for %d checks; batching should need far fewer", calls, callers*each)
	}
	t.Logf("hot key: %d checks in %d script calls", callers*each, calls)

	adm, calls = run(func(g, i int) string { return "k" + strconv.Itoa(g*each+i) }, ratewarden.PerHour(10))
	if adm != callers*each {
		t.Errorf("many keys: admitted %d, want all %d", adm, callers*each)
	}
	if calls >= callers*each/2 {
		t.Errorf("many keys: %d script calls for %d checks", calls, callers*each)
	}
	if n := do(t, srv, "EXISTS", s.Key("k0", ratewarden.PerHour(10)), s.Key("k3199", ratewarden.PerHour(10))); n != "2" {
		t.Errorf("EXISTS of the first and last key: %s, want 2", n)
	}
}

// TestBatchingNoDelayWhenSequential: one caller at a time never waits for
// a batch: every check is its own script call, sent at once.
func TestBatchingNoDelayWhenSequential(t *testing.T) {
	srv := testredis.Start(t)
	// The Store has no deny cache: the denials after the 5th check reach
	// Redis too.
	l := limiter(t, openStore(t, srv.Addr))
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 5, Period: time.Hour}
	if _, err := l.Allow(bg, "warm-up", lim); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, srv)
	const checks = 40
	admitted := 0
	for range checks {
		r, err := l.Allow(bg, "seq", lim)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if calls := scriptCalls(t, srv) - before; calls != checks {
		t.Errorf("%d sequential checks made %d script calls, want one each", checks, calls)
	}
	if admitted != 5 {
		t.Errorf("admitted %d, want 5", admitted)
	}
}

// blockingEval holds every script call until release is closed, so that
// later checks must queue; it counts calls and the checks they carry.
type blockingEval struct {
	evaluator
	release chan struct{}
	calls   atomic.Int64
	checks  atomic.Int64
}

func (e *blockingEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	e.calls.Add(1)
	e.checks.Add(int64(len(keys)))
	<-e.release
	return e.evaluator.eval(ctx, keys, args, dst)
}

// TestBatchingQueuedCheckLeavesOnCancel: with both lanes held, a queued
// check whose context ends returns at once with the context's error and is
// never sent; the checks queued with it go out together in one call once a
// lane frees up.
func TestBatchingQueuedCheckLeavesOnCancel(t *testing.T) {
	srv := testredis.Start(t)
	inner := openStore(t, srv.Addr).ev
	ev := &blockingEval{evaluator: inner, release: make(chan struct{})}
	s, err := storeOn(ev, WithBatchLanes(2), WithBatchSize(8))
	if err != nil {
		t.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	check := func(ctx context.Context, key string) error {
		return s.Check(ctx, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: 1}, make([]ratewarden.Result, 1))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 2 { // hold both lanes
		wg.Go(func() { errs <- check(bg, "lane"+strconv.Itoa(i)) })
	}
	for ev.calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	for i := range 5 { // queue behind them
		wg.Go(func() { errs <- check(bg, "queued"+strconv.Itoa(i)) })
	}
	for s.bat.queued() < 5 { // all five queued, none late enough to find a free lane
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = check(ctx, "cancelled")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Fatalf("queued check after its deadline: %v", err)
	}
	// The lanes are held until released below: a check that did not leave
	// on its deadline would wait for ever. The cap is only for a report.
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("queued check took %v to leave on its 30 ms deadline", d)
	}
	close(ev.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c, n := ev.calls.Load(), ev.checks.Load(); c != 3 || n != 7 {
		t.Errorf("%d script calls carrying %d checks; want 3 calls (2 lanes, then 1 batch of 5) and 7 checks", c, n)
	}
	if n := do(t, srv, "EXISTS", s.Key("cancelled", lim)); n != "0" {
		t.Errorf("the cancelled check reached Redis (EXISTS %s)", n)
	}
	for i := range 5 {
		if v := do(t, srv, "GET", s.Key("queued"+strconv.Itoa(i), lim)); v == "" {
			t.Errorf("queued%d: no state", i)
		}
	}
}

// TestBatchErrorsReachEveryCheck: when the batched call fails (Redis went
// away while the checks were queued), every check in it gets the error.
func TestBatchErrorsReachEveryCheck(t *testing.T) {
	srv := testredis.Start(t)
	inner := openStore(t, srv.Addr).ev
	ev := &blockingEval{evaluator: inner, release: make(chan struct{})}
	s, err := storeOn(ev, WithBatchLanes(1))
	if err != nil {
		t.Fatal(err)
	}
	lim := ratewarden.PerSecond(10)
	check := func(key string) error {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		return s.Check(ctx, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: 1}, make([]ratewarden.Result, 1))
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = check("first") }) // holds the lane; its own fate does not matter
	for ev.calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = check("queued" + strconv.Itoa(i)) })
	}
	for s.bat.queued() < 3 {
		time.Sleep(time.Millisecond)
	}
	srv.Kill()
	close(ev.release)
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Errorf("check %d of the failed batch: %v, want ErrStoreUnavailable", i, err)
		}
	}
	if c := ev.calls.Load(); c != 2 {
		t.Errorf("%d script calls, want 2 (the first check, then one batch)", c)
	}
}

// TestBatchBadKeyFailsAlone: a key holding another type fails its own
// check; the other checks of its batch are decided as usual.
func TestBatchBadKeyFailsAlone(t *testing.T) {
	srv := testredis.Start(t)
	inner := openStore(t, srv.Addr).ev
	ev := &blockingEval{evaluator: inner, release: make(chan struct{})}
	s, err := storeOn(ev, WithBatchLanes(1))
	if err != nil {
		t.Fatal(err)
	}
	bad := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: time.Second}
	good := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: time.Second}
	do(t, srv, "SET", s.Key("wrong", bad), "not a sorted set")
	check := func(key string, lim ratewarden.Limit) error {
		return s.Check(bg, &ratewarden.Request{Key: key, Limits: []ratewarden.Limit{lim}, Cost: 1}, make([]ratewarden.Result, 1))
	}
	var wg sync.WaitGroup
	var first error
	wg.Go(func() { first = check("first", good) })
	for ev.calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	errs := make([]error, 3)
	wg.Go(func() { errs[0] = check("a", good) })
	wg.Go(func() { errs[1] = check("wrong", bad) })
	wg.Go(func() { errs[2] = check("b", good) })
	for s.bat.queued() < 3 {
		time.Sleep(time.Millisecond)
	}
	close(ev.release)
	wg.Wait()
	if first != nil {
		t.Fatalf("the lone first check: %v", first)
	}
	// The bad key fails its own check only; the others in its batch are
	// decided as usual.
	for i, err := range errs {
		if bad := i == 1; bad != errors.Is(err, ratewarden.ErrKeyState) || !bad && err != nil || errors.Is(err, ratewarden.ErrStoreUnavailable) {
			t.Errorf("check %d of the batch (bad: %v): %v", i, bad, err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if v := do(t, srv, "GET", s.Key(k, good)); v == "(nil)" {
			t.Errorf("check %s of the batch left no state", k)
		}
	}
	if c := ev.calls.Load(); c != 2 {
		t.Errorf("%d script calls, want 2", c)
	}
}

func TestBatchOptions(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	for _, opt := range []Option{WithBatchSize(0), WithBatchLanes(0), WithBatchSize(-3)} {
		if _, err := New(c, opt); !errors.Is(err, ratewarden.ErrInvalidConfig) {
			t.Errorf("bad batch option: %v, want ErrInvalidConfig", err)
		}
	}
	if s, err := New(c, WithBatching(false)); err != nil || s.bat != nil {
		t.Errorf("WithBatching(false): batcher %v, err %v", s.bat, err)
	}
	if s, err := New(c); err != nil || s.bat == nil || s.bat.size != DefaultBatchSize || s.bat.lanes != DefaultBatchLanes {
		t.Errorf("default: %+v, err %v", s.bat, err)
	}
}
