package algo

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ratewarden/ratewarden"
)

// t0 is a window boundary for every period that divides a second.
const t0 int64 = 1_700_000_000_000_000

const sec int64 = 1_000_000

type step[S any] struct {
	name    string
	state   S // input state; ignored when chain is set
	chain   bool
	at      int64 // offset from t0, µs
	n       int64
	consume bool

	allowed    bool
	remaining  int64
	retryAfter int64
	resetAfter int64
	expireAt   int64 // offset from t0; checked when wantExpire
	wantExpire bool
	wantState  S
}

// runSteps evaluates each step (with the previous step's output state when
// chain is set) and compares everything.
func runSteps[S any](t *testing.T, steps []step[S], f func(S, int64, int64, bool) (S, Outcome), eq func(a, b S) bool) {
	t.Helper()
	var prev S
	for _, st := range steps {
		in := st.state
		if st.chain {
			in = prev
		}
		out, o := f(in, t0+st.at, st.n, st.consume)
		if o.Allowed != st.allowed || o.Remaining != st.remaining || o.RetryAfter != st.retryAfter || o.ResetAfter != st.resetAfter {
			t.Errorf("%s: got allowed=%v remaining=%d retryAfter=%d resetAfter=%d, want %v %d %d %d",
				st.name, o.Allowed, o.Remaining, o.RetryAfter, o.ResetAfter, st.allowed, st.remaining, st.retryAfter, st.resetAfter)
		}
		if st.wantExpire && o.ExpireAt != t0+st.expireAt {
			t.Errorf("%s: ExpireAt = t0%+d, want t0%+d", st.name, o.ExpireAt-t0, st.expireAt)
		}
		if !eq(out, st.wantState) {
			t.Errorf("%s: state = %v, want %v", st.name, out, st.wantState)
		}
		if wrote := st.consume && st.allowed && st.n > 0; o.Wrote != wrote {
			t.Errorf("%s: Wrote = %v, want %v", st.name, o.Wrote, wrote)
		}
		prev = out
	}
}

func winEq(a, b Window) bool { return a == b }

func TestFixedWindow(t *testing.T) {
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: 1e9})
	f := func(s Window, now, n int64, c bool) (Window, Outcome) { return FixedWindow(s, now, p, n, c) }
	w := func(start, curr int64) Window { return Window{Start: t0 + start, Curr: curr} }
	runSteps(t, []step[Window]{
		{name: "fresh, peek 3", at: 100, n: 3, allowed: true, remaining: 3, expireAt: sec, wantExpire: true},
		{name: "first", at: 100, n: 1, consume: true, allowed: true, remaining: 2, resetAfter: sec - 100, expireAt: sec, wantExpire: true, wantState: w(0, 1)},
		{name: "two more", chain: true, at: 200, n: 2, consume: true, allowed: true, remaining: 0, resetAfter: sec - 200, wantState: w(0, 3)},
		{name: "over", chain: true, at: 300, n: 1, consume: true, retryAfter: sec - 300, resetAfter: sec - 300, wantState: w(0, 3)},
		{name: "cost 0 when full", chain: true, at: 300, n: 0, consume: true, allowed: true, resetAfter: sec - 300, wantState: w(0, 3)},
		{name: "last µs of the window", chain: true, at: sec - 1, n: 1, consume: true, retryAfter: 1, resetAfter: 1, wantState: w(0, 3)},
		{name: "boundary: new window", chain: true, at: sec, n: 1, consume: true, allowed: true, remaining: 2, resetAfter: sec, expireAt: 2 * sec, wantExpire: true, wantState: w(sec, 1)},
		{name: "peek leaves state", chain: true, at: sec + 5, n: 2, allowed: true, remaining: 2, resetAfter: sec - 5, wantState: w(sec, 1)},
		{name: "cost 0 leaves state", chain: true, at: sec + 5, n: 0, consume: true, allowed: true, remaining: 2, resetAfter: sec - 5, wantState: w(sec, 1)},
		{name: "windows later", chain: true, at: 7*sec + 9, n: 3, consume: true, allowed: true, remaining: 0, resetAfter: sec - 9, wantState: w(7*sec, 3)},
	}, f, winEq)
}

func TestSlidingWindow(t *testing.T) {
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: 1e9})
	f := func(s Window, now, n int64, c bool) (Window, Outcome) { return SlidingWindow(s, now, p, n, c) }
	full := Window{Start: t0, Curr: 10}
	var steps []step[Window]
	// The previous window's 10 decay linearly across the next window.
	for k := range int64(10) {
		steps = append(steps, step[Window]{
			name: "decay", state: full, at: sec + k*sec/10, n: k, allowed: true, remaining: k,
			resetAfter: sec - k*sec/10, expireAt: 3 * sec, wantExpire: true, wantState: full,
		})
	}
	steps = append(steps, []step[Window]{
		{name: "decay: one more than remains", state: full, at: sec + sec/4, n: 3, consume: true,
			// ceil(10·0.75) = 8 weighted: 2 remain; 3 fit once the weight is 7, at 30%.
			remaining: 2, retryAfter: sec / 20, resetAfter: 3 * sec / 4, wantState: full},
		{name: "decay: consume what remains", state: full, at: sec + sec/4, n: 2, consume: true, allowed: true,
			resetAfter: 2*sec - sec/4, expireAt: 3 * sec, wantExpire: true, wantState: Window{Start: t0 + sec, Curr: 2, Prev: 10}},
		{name: "next window only", state: Window{Start: t0, Curr: 8}, at: 4 * sec / 10, n: 3, consume: true,
			// 8+3 > 10 in this window; in the next, ceil(8·(1−e)) <= 7 from e = 1/8.
			remaining: 2, retryAfter: 6*sec/10 + sec/8, resetAfter: 2*sec - 4*sec/10, wantState: Window{Start: t0, Curr: 8}},
		{name: "two windows later: empty", state: full, at: 2*sec + 1, n: 10, consume: true, allowed: true,
			resetAfter: 2*sec - 1, wantState: Window{Start: t0 + 2*sec, Curr: 10}},
		{name: "fresh cost 0", at: 5, n: 0, consume: true, allowed: true, remaining: 10},
		{name: "fresh", at: 5, n: 4, consume: true, allowed: true, remaining: 6, resetAfter: 2*sec - 5, expireAt: 2 * sec, wantExpire: true, wantState: Window{Start: t0, Curr: 4}},
		{name: "peek leaves state", chain: true, at: 6, n: 6, allowed: true, remaining: 6, resetAfter: 2*sec - 6, wantState: Window{Start: t0, Curr: 4}},
		{name: "over in the same window", chain: true, at: 6, n: 7, consume: true, remaining: 6,
			// 4+7 > 10: next window, where ceil(4·(1−e)) <= 3 from e = 1/4.
			retryAfter: sec - 6 + sec/4, resetAfter: 2*sec - 6, wantState: Window{Start: t0, Curr: 4}},
	}...)
	runSteps(t, steps, f, winEq)
}

func TestTokenBucket(t *testing.T) {
	// 10 per second (a token every 100ms), bucket of 5.
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: 1e9, Burst: 5})
	f := func(s Bucket, now, n int64, c bool) (Bucket, Outcome) { return TokenBucket(s, now, p, n, c) }
	eq := func(a, b Bucket) bool { return a == b }
	const T = sec / 10
	runSteps(t, []step[Bucket]{
		{name: "fresh peek", at: 0, n: 5, allowed: true, remaining: 5, expireAt: 0, wantExpire: true},
		{name: "burst", at: 0, n: 5, consume: true, allowed: true, remaining: 0, resetAfter: 5 * T, expireAt: 5 * T, wantExpire: true, wantState: Bucket{T: t0 + 5*T}},
		{name: "over by one", chain: true, at: 0, n: 1, consume: true, retryAfter: T, resetAfter: 5 * T, wantState: Bucket{T: t0 + 5*T}},
		{name: "over by two", chain: true, at: 0, n: 2, consume: true, retryAfter: 2 * T, resetAfter: 5 * T, wantState: Bucket{T: t0 + 5*T}},
		{name: "one µs early", chain: true, at: T - 1, n: 1, consume: true, retryAfter: 1, resetAfter: 4*T + 1, wantState: Bucket{T: t0 + 5*T}},
		{name: "refilled one", chain: true, at: T, n: 1, consume: true, allowed: true, remaining: 0, resetAfter: 5 * T, wantState: Bucket{T: t0 + 6*T}},
		{name: "half a token", chain: true, at: T + T/2, n: 1, retryAfter: T / 2, resetAfter: 4*T + T/2, wantState: Bucket{T: t0 + 6*T}},
		{name: "cost 0", chain: true, at: T + T/2, n: 0, consume: true, allowed: true, resetAfter: 4*T + T/2, wantState: Bucket{T: t0 + 6*T}},
		{name: "partly refilled", chain: true, at: 4 * T, n: 2, consume: true, allowed: true, remaining: 1, resetAfter: 4 * T, expireAt: 8 * T, wantExpire: true, wantState: Bucket{T: t0 + 8*T}},
		{name: "long idle: full", chain: true, at: sec, n: 0, allowed: true, remaining: 5, expireAt: sec, wantExpire: true, wantState: Bucket{T: t0 + 8*T}},
		{name: "long idle: burst again", chain: true, at: sec, n: 5, consume: true, allowed: true, resetAfter: 5 * T, wantState: Bucket{T: t0 + sec + 5*T}},
	}, f, eq)

	// Burst 0 means Rate: 2 per second, then one every 500ms.
	p2 := FromLimit(ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: 1e9})
	tat, o := TokenBucket(Bucket{}, t0, p2, 2, true)
	if !o.Allowed || o.Remaining != 0 || tat != (Bucket{T: t0 + sec}) {
		t.Fatalf("burst 0: %+v tat=t0%+d", o, tat.T-t0)
	}
	if _, o := TokenBucket(tat, t0, p2, 1, true); o.Allowed || o.RetryAfter != sec/2 {
		t.Fatalf("burst 0, third: %+v, want retry after 500ms", o)
	}
}

// TestTokenBucketRemainingAfterConsume: TokenBucket derives Remaining after
// a consume from the count before it; it must equal the count the stored
// state evaluates to, over random limits, states and costs.
func TestTokenBucketRemainingAfterConsume(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for range 20_000 {
		p := FromLimit(randLimit(r, ratewarden.TokenBucket))
		now := t0 + r.Int64N(p.Period)
		s := Bucket{T: now + r.Int64N(2*p.Period) - p.Period/2, F: r.Int64N(p.Rate)}
		n := randCost(r, p.Capacity)
		b, o := TokenBucket(s, now, p, n, true)
		if !o.Wrote {
			continue
		}
		if want := max(p.Capacity-bucketUsed(b, now, p), 0); o.Remaining != want {
			t.Fatalf("%+v state %+v now %d cost %d: Remaining %d, the stored state holds room for %d", p, s, now, n, o.Remaining, want)
		}
	}
}

func TestSlidingLog(t *testing.T) {
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 3, Period: 1e9})
	f := func(s Log, now, n int64, c bool) (Log, Outcome) {
		return SlidingLog(slices.Clone(s), now, p, n, c)
	}
	lg := func(offs ...int64) Log {
		l := Log{}
		for _, o := range offs {
			l = append(l, t0+o)
		}
		return l
	}
	eq := func(a, b Log) bool { return len(a) == 0 && len(b) == 0 || slices.Equal(a, b) }
	runSteps(t, []step[Log]{
		{name: "fresh", at: 0, n: 1, consume: true, allowed: true, remaining: 2, resetAfter: sec, expireAt: sec, wantExpire: true, wantState: lg(0)},
		{name: "second", chain: true, at: 100, n: 1, consume: true, allowed: true, remaining: 1, resetAfter: sec, expireAt: sec + 100, wantExpire: true, wantState: lg(0, 100)},
		{name: "third", chain: true, at: 200, n: 1, consume: true, allowed: true, remaining: 0, resetAfter: sec, wantState: lg(0, 100, 200)},
		{name: "over by one: wait for the oldest", chain: true, at: 300, n: 1, consume: true, retryAfter: sec - 300, resetAfter: sec - 100, wantState: lg(0, 100, 200)},
		{name: "over by two: wait for the second", chain: true, at: 300, n: 2, retryAfter: sec - 200, resetAfter: sec - 100, wantState: lg(0, 100, 200)},
		{name: "oldest still in (now−P, now]", chain: true, at: sec - 1, n: 1, consume: true, retryAfter: 1, resetAfter: 201, wantState: lg(0, 100, 200)},
		{name: "oldest left", chain: true, at: sec, n: 1, consume: true, allowed: true, remaining: 0, resetAfter: sec, wantState: lg(100, 200, sec)},
		{name: "peek leaves state", chain: true, at: sec + 150, n: 1, allowed: true, remaining: 1, resetAfter: sec - 150, wantState: lg(100, 200, sec)},
		{name: "cost 2 at one instant", chain: true, at: sec + 250, n: 2, consume: true, allowed: true, remaining: 0, resetAfter: sec, wantState: lg(sec, sec+250, sec+250)},
		{name: "duplicates leave together", chain: true, at: 2*sec + 249, n: 2, consume: true, remaining: 1, retryAfter: 1, resetAfter: 1, wantState: lg(sec, sec+250, sec+250)},
		{name: "all expired", chain: true, at: 2*sec + 250, n: 0, consume: true, allowed: true, remaining: 3, wantState: lg(sec, sec+250, sec+250)},
	}, f, eq)
}

// TestSlidingLogReusesArray checks the documented in-place compaction: the
// log does not creep forward through its array.
func TestSlidingLogReusesArray(t *testing.T) {
	p := FromLimit(ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 4, Period: 1e9})
	var s Log
	now := t0
	for range 1000 {
		var o Outcome
		s, o = SlidingLog(s, now, p, 1, true)
		if !o.Allowed {
			t.Fatalf("at t0%+d: denied", now-t0)
		}
		now += sec / 4
	}
	if len(s) != 4 || cap(s) > 16 {
		t.Fatalf("after 1000 steps: len %d cap %d, want len 4 and a small array", len(s), cap(s))
	}
}
