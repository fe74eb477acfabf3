package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// takeModel is Lender.Take on internal/algo: a verdict for need, then,
// when it admits, a check of min(want, remaining) that consumes.
// It returns the consuming check's outcome (zero when denied).
func takeModel(m *model, now, need, want int64) (Grant, algo.Outcome) {
	v := m.eval(0, now, need, false)
	g := Grant{Now: time.UnixMicro(now), Remaining: v.Remaining,
		RetryAfter: time.Duration(v.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(v.ResetAfter) * time.Microsecond}
	lim := m.limits[0]
	if lim.Algorithm == ratewarden.FixedWindow {
		P := lim.Period.Microseconds()
		g.Window = time.UnixMicro(now - now%P)
	}
	if !v.Allowed {
		return g, algo.Outcome{}
	}
	g.Units = min(want, v.Remaining)
	o := m.eval(0, now, g.Units, true)
	g.Remaining, g.RetryAfter, g.ResetAfter = o.Remaining, 0, time.Duration(o.ResetAfter)*time.Microsecond
	if lim.Algorithm == ratewarden.TokenBucket {
		g.Due = time.Duration(v.ResetAfter) * time.Microsecond
	}
	return g, o
}

// giveModel is Lender.GiveBack on internal/algo's window state.
func giveModel(m *model, window time.Time, n int64) int64 {
	w := &m.win[0]
	if w.Start != window.UnixMicro() || w.Curr == 0 {
		return 0
	}
	n = min(n, w.Curr)
	w.Curr -= n
	return n
}

// leasableLimit draws one FixedWindow or TokenBucket limit as the
// differential test draws its limits.
func leasableLimit(r *rand.Rand) ratewarden.Limit {
	for {
		for _, l := range genLimits(r) {
			if l.Algorithm == ratewarden.FixedWindow || l.Algorithm == ratewarden.TokenBucket {
				return l
			}
		}
	}
}

// runLeaseDifferential runs one random sequence of checks, takes and
// give-backs on one key through internal/algo and the scripts, and fails
// at the first difference in a reply or in the state.
// leaseTally counts what the sequences did, so the test can tell it was
// not vacuous.
type leaseTally struct{ granted, denied, givenBack, givenNone int }

func runLeaseDifferential(t *testing.T, c rueidis.Client, s *Store, ev *atEval, ld *Lender, seed uint64, steps int, tally *leaseTally) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x5eed1ea5e))
	lim := leasableLimit(r)
	m := newModel([]ratewarden.Limit{lim})
	key := fmt.Sprintf("lease-diff:%d:%d", seed, runs.Add(1))
	now := time.Now().Add(time.Hour).UnixMicro() + r.Int64N(1e12)
	var window time.Time // the last take's window
	res := make([]ratewarden.Result, 1)
	for i := range steps {
		var n int64
		var peek bool
		now, n, peek = genStep(r, now, m.limits)
		ev.now = now
		where := fmt.Sprintf("seed %d step %d (now %d, %v)", seed, i, now, lim)
		switch op := r.IntN(5); {
		case op < 2: // a plain check
			want := m.check(now, n, peek)[0]
			if _, err := s.check(bg, &ratewarden.Request{Key: key, Limits: m.limits, Cost: n, Peek: peek}, res); err != nil {
				t.Fatalf("%s: check: %v", where, err)
			}
			if res[0].Allowed != want.Allowed || res[0].Remaining != want.Remaining {
				t.Fatalf("%s: check cost %d: %+v, algo %+v", where, n, res[0], want)
			}
			compareState(t, c, s, m, 0, key, want)
		case op < 4 || lim.Algorithm == ratewarden.TokenBucket: // a take
			need := max(n, 1)
			want := need + r.Int64N(3)*r.Int64N(min(lim.Capacity(), 100)+1)
			wg, o := takeModel(m, now, need, want)
			g, err := ld.Take(bg, key, lim, need, want)
			if err != nil {
				t.Fatalf("%s: take %d..%d: %v", where, need, want, err)
			}
			if !g.Now.Equal(wg.Now) || !g.Window.Equal(wg.Window) || g.Units != wg.Units || g.Remaining != wg.Remaining ||
				g.RetryAfter != wg.RetryAfter || g.ResetAfter != wg.ResetAfter || g.Due != wg.Due {
				t.Fatalf("%s: take %d..%d:\n got %+v\nwant %+v", where, need, want, g, wg)
			}
			if g.Units > 0 {
				window = g.Window
				tally.granted++
			} else {
				tally.denied++
			}
			compareState(t, c, s, m, 0, key, o)
		default: // a give-back, to the last take's window or an earlier one
			w := window
			if r.IntN(4) == 0 {
				w = w.Add(-lim.Period)
			}
			units := 1 + r.Int64N(min(lim.Capacity(), 50))
			want := giveModel(m, w, units)
			got, err := ld.GiveBack(bg, key, lim, w, units)
			if err != nil || got != want {
				t.Fatalf("%s: give back %d to %v: %d, %v; algo gives back %d", where, units, w, got, err, want)
			}
			if got > 0 {
				tally.givenBack++
			} else {
				tally.givenNone++
			}
			compareState(t, c, s, m, 0, key, algo.Outcome{})
		}
	}
}

// TestLeaseDifferential holds the lease script to internal/algo bit for
// bit: a take is a verdict and a consuming check at one instant, a
// give-back lowers the window's count, and both leave exactly algo's
// state (and a take the expiry a check sets), interleaved with checks.
func TestLeaseDifferential(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	ld, err := NewLender(s)
	if err != nil {
		t.Fatal(err)
	}
	var tally leaseTally
	for seed := range sequences(300) {
		runLeaseDifferential(t, c, s, ev, ld, seed, 30, &tally)
	}
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = gc.Close() })
	gs, gev := clockStore(t, &goRedisEval{c: gc, s: redis.NewScript(testClockLua + checkBody)})
	gld, err := NewLender(gs)
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(30) {
		runLeaseDifferential(t, c, gs, gev, gld, 1000+seed, 30, &tally)
	}
	t.Logf("takes granted %d, denied %d; give-backs that gave back %d, that found nothing %d", tally.granted, tally.denied, tally.givenBack, tally.givenNone)
	if tally.granted < 100 || tally.denied < 100 || tally.givenBack < 20 || tally.givenNone < 20 {
		t.Errorf("the sequences missed a case: %+v", tally)
	}
}

// Bad arguments are errors naming the field, and reach no Redis.
func TestLenderRejectsBadArguments(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	ld, err := NewLender(s)
	if err != nil {
		t.Fatal(err)
	}
	fw := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}
	tb := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Minute}
	before := scriptCalls(t, srv)
	take := func(key string, lim ratewarden.Limit, need, want int64) func() error {
		return func() error { _, err := ld.Take(bg, key, lim, need, want); return err }
	}
	give := func(key string, lim ratewarden.Limit, n int64) func() error {
		return func() error { _, err := ld.GiveBack(bg, key, lim, time.Now(), n); return err }
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
		says string
	}{
		{"take sliding_window", take("k", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100, Period: time.Minute}, 1, 1), ratewarden.ErrInvalidLimit, "fixed_window or token_bucket"},
		{"take need 0", take("k", fw, 0, 5), ratewarden.ErrInvalidCost, "need"},
		{"take want < need", take("k", fw, 3, 2), ratewarden.ErrInvalidCost, "want"},
		{"take need > capacity", take("k", tb, 11, 20), ratewarden.ErrInvalidCost, "capacity"},
		{"take empty key", take("", fw, 1, 1), ratewarden.ErrInvalidKey, "key"},
		{"take invalid limit", take("k", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10}, 1, 1), ratewarden.ErrInvalidLimit, "period"},
		{"give back token_bucket", give("k", tb, 1), ratewarden.ErrInvalidLimit, "fixed windows only"},
		{"give back 0", give("k", fw, 0), ratewarden.ErrInvalidCost, "units"},
		{"give back empty key", give("", fw, 1), ratewarden.ErrInvalidKey, "key"},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v naming %q", tc.name, err, tc.want, tc.says)
		}
	}
	if n := scriptCalls(t, srv) - before; n != 0 {
		t.Errorf("bad arguments made %d script calls", n)
	}
}

// plainEval is an evaluator that cannot run another script.
type plainEval struct{ evaluator }

func TestNewLenderRefuses(t *testing.T) {
	if _, err := NewLender(nil); !errors.Is(err, ratewarden.ErrInvalidConfig) {
		t.Errorf("NewLender(nil): %v", err)
	}
	srv := testredis.Start(t)
	s, err := storeOn(plainEval{newRueidisEval(newClient(t, srv.Addr), script, evalshaOnly)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewLender(s); !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "New or NewGoRedis") {
		t.Errorf("NewLender(a Store on another evaluator): %v", err)
	}
}

// A take from a key that holds another type or a malformed state fails
// with ErrKeyState (not ErrStoreUnavailable) and changes nothing.
func TestLenderWrongType(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	ld, err := NewLender(s)
	if err != nil {
		t.Fatal(err)
	}
	fw := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}
	tb := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Minute}
	do(t, srv, "SET", s.Key("bad", fw), "not a window")
	do(t, srv, "LPUSH", s.Key("bad", tb), "x")
	for _, lim := range []ratewarden.Limit{fw, tb} {
		if _, err := ld.Take(bg, "bad", lim, 1, 5); !errors.Is(err, ratewarden.ErrKeyState) || errors.Is(err, ratewarden.ErrStoreUnavailable) || strings.Contains(err.Error(), "bad") {
			t.Errorf("take %v: %v, want ErrKeyState only, without the key", lim, err)
		}
	}
	if _, err := ld.GiveBack(bg, "bad", fw, time.Now(), 1); !errors.Is(err, ratewarden.ErrKeyState) || errors.Is(err, ratewarden.ErrStoreUnavailable) {
		t.Errorf("give back: %v, want ErrKeyState only", err)
	}
	if v := do(t, srv, "GET", s.Key("bad", fw)); v != "not a window" {
		t.Errorf("state after the failed take: %q", v)
	}
}
