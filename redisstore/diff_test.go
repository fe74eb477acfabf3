package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// sequences is how many random sequences a differential test replays: n,
// or a tenth of it in -short mode (the quick loop; make test runs all).
func sequences(n uint64) uint64 {
	if testing.Short() {
		return max(n/10, 1)
	}
	return n
}

// testClockLua replaces the production clock: now is ARGV[1], the checks
// start at ARGV[2]. The algorithms are the embedded production text.
const testClockLua = "local now = tonumber(ARGV[1])\nlocal base = 2\n"

// atEval runs the test-clock script (through either client's evaluator)
// with now prepended to the arguments.
type atEval struct {
	evaluator
	now int64
}

func (e *atEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	a := append([]string{strconv.FormatInt(e.now, 10)}, args...)
	return e.evaluator.eval(ctx, keys, a, dst)
}

// rescript runs body (the lease script, for a Lender) after the test
// clock too, on the same client and with the same now.
func (e *atEval) rescript(body string) evaluator {
	var inner evaluator
	switch x := e.evaluator.(type) {
	case *rueidisEval:
		inner = newRueidisEval(x.c, testClockLua+body, evalshaOnly)
	case *goRedisEval:
		inner = &goRedisEval{c: x.c, s: redis.NewScript(testClockLua + body)}
	case *longCharge:
		inner = x.rescript(body)
	default:
		panic(fmt.Sprintf("atEval over %T", e.evaluator))
	}
	return &sameClock{clock: e, evaluator: inner}
}

// sameClock runs its script with the now of clock prepended.
type sameClock struct {
	clock *atEval
	evaluator
}

func (e *sameClock) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	a := append([]string{strconv.FormatInt(e.clock.now, 10)}, args...)
	return e.evaluator.eval(ctx, keys, a, dst)
}

// newClockStore returns a Store on c whose script takes now from ev.now.
func newClockStore(tb testing.TB, c rueidis.Client) (*Store, *atEval) {
	tb.Helper()
	return clockStore(tb, newRueidisEval(c, testClockLua+checkBody, evalshaOnly))
}

func clockStore(tb testing.TB, inner evaluator) (*Store, *atEval) {
	tb.Helper()
	ev := &atEval{evaluator: inner}
	s, err := storeOn(ev)
	if err != nil {
		tb.Fatal(err)
	}
	return s, ev
}

// model is one key's state under each limit, kept by internal/algo.
type model struct {
	limits []ratewarden.Limit
	params []algo.Params
	win    []algo.Window
	tat    []algo.Bucket
	log    []algo.Log
}

func newModel(limits []ratewarden.Limit) *model {
	m := &model{limits: limits}
	for _, l := range limits {
		m.params = append(m.params, algo.FromLimit(l))
	}
	m.win = make([]algo.Window, len(limits))
	m.tat = make([]algo.Bucket, len(limits))
	m.log = make([]algo.Log, len(limits))
	return m
}

func (m *model) eval(j int, now, n int64, consume bool) algo.Outcome {
	p := m.params[j]
	var o algo.Outcome
	switch p.Alg {
	case ratewarden.FixedWindow:
		m.win[j], o = algo.FixedWindow(m.win[j], now, p, n, consume)
	case ratewarden.SlidingWindow:
		m.win[j], o = algo.SlidingWindow(m.win[j], now, p, n, consume)
	case ratewarden.TokenBucket:
		m.tat[j], o = algo.TokenBucket(m.tat[j], now, p, n, consume)
	case ratewarden.SlidingLog:
		m.log[j], o = algo.SlidingLog(m.log[j], now, p, n, consume)
	}
	return o
}

// check is the all-or-nothing multi-limit check on algo: every verdict
// without consuming, then, when all admit, consume from each.
func (m *model) check(now, n int64, peek bool) []algo.Outcome {
	outs := make([]algo.Outcome, len(m.limits))
	ok := true
	for j := range m.limits {
		outs[j] = m.eval(j, now, n, false)
		ok = ok && outs[j].Allowed
	}
	if ok && !peek && n > 0 {
		for j := range m.limits {
			outs[j] = m.eval(j, now, n, true)
		}
	}
	return outs
}

// genLimits draws 1–3 valid limits with distinct scopes; TokenBucket drain
// times stay below 10^15 µs so every instant fits a float64 exactly.
func genLimits(r *rand.Rand) []ratewarden.Limit {
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 1500 * time.Millisecond, time.Minute, time.Hour, 24 * time.Hour, ratewarden.MaxPeriod}
	rates := []int64{1, 2, 3, 5, 10, 100, 1000, 1_000_000, 1_000_000_000, ratewarden.MaxRate}
	var ls []ratewarden.Limit
	for len(ls) < 1+r.IntN(3) {
		l := ratewarden.Limit{Algorithm: ratewarden.Algorithm(r.IntN(4))}
		if r.IntN(3) == 0 {
			l.Period = time.Duration(1+r.IntN(5000)) * time.Millisecond
		} else {
			l.Period = periods[r.IntN(len(periods))]
		}
		switch l.Algorithm {
		case ratewarden.SlidingLog:
			l.Rate = 1 + r.Int64N(20)
			if r.IntN(10) == 0 {
				l.Rate = 1 + r.Int64N(ratewarden.MaxLogRate)
			}
		case ratewarden.TokenBucket:
			l.Rate = min(rates[r.IntN(len(rates))], l.Period.Microseconds())
			if r.IntN(2) == 0 {
				l.Burst = 1 + r.Int64N(min(l.Rate*3, 1000))
			}
			// Bound the drain time of a full bucket.
			for l.Validate() != nil { // a full bucket must refill within MaxPeriod
				l.Burst = max(l.Capacity()/2, 1)
			}
		default:
			l.Rate = rates[r.IntN(len(rates))]
		}
		if l.Validate() != nil {
			continue
		}
		if slices.ContainsFunc(ls, func(o ratewarden.Limit) bool { return o.Scope() == l.Scope() }) {
			continue
		}
		ls = append(ls, l)
	}
	return ls
}

// genStep draws the next instant, a cost and the peek flag; instants often
// land on or next to window boundaries of one of the limits.
func genStep(r *rand.Rand, now int64, limits []ratewarden.Limit) (int64, int64, bool) {
	P := limits[r.IntN(len(limits))].Period.Microseconds()
	switch r.IntN(8) {
	case 0: // same instant
	case 1:
		now += 1 + r.Int64N(3)
	case 2:
		now += r.Int64N(P/10 + 1)
	case 3:
		now += r.Int64N(2*P + 1)
	case 4: // to a boundary, or just around it
		now = now - now%P + P + r.Int64N(3) - 1
	default:
		now += r.Int64N(P/3 + 1)
	}
	capacity := limits[0].Capacity()
	for _, l := range limits[1:] {
		capacity = min(capacity, l.Capacity())
	}
	var n int64
	switch r.IntN(6) {
	case 0:
		n = 0
	case 1:
		n = r.Int64N(min(capacity, 20000) + 1)
	case 2:
		n = capacity
	default:
		n = 1
	}
	if l := limits[0]; l.Algorithm == ratewarden.SlidingLog && n > 3000 {
		n = 3000 // the log keeps one member per unit: keep sequences quick
	}
	return now, n, r.IntN(5) == 0
}

var runs atomic.Int64

// runDifferential runs steps checks of one random sequence through algo and
// the script and fails at the first difference in a result or the state.
func runDifferential(t *testing.T, c rueidis.Client, s *Store, ev *atEval, seed uint64, steps int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	limits := genLimits(r)
	m := newModel(limits)
	key := fmt.Sprintf("diff:%d:%d", seed, runs.Add(1)) // a fresh key: fuzzing repeats seeds
	// Instants start ahead of the real clock (and only grow), so the
	// expiries the script sets lie in Redis' future and keys stay readable.
	now := time.Now().Add(time.Hour).UnixMicro() + r.Int64N(1e12)
	res := make([]ratewarden.Result, len(limits))
	for i := range steps {
		var n int64
		var peek bool
		now, n, peek = genStep(r, now, limits)
		want := m.check(now, n, peek)
		ev.now = now
		got, err := s.check(bg, &ratewarden.Request{Key: key, Limits: limits, Cost: n, Peek: peek}, res)
		if err != nil {
			t.Fatalf("seed %d step %d: %v", seed, i, err)
		}
		if got != now {
			t.Fatalf("seed %d step %d: script decided at %d, want %d", seed, i, got, now)
		}
		for j, o := range want {
			w := ratewarden.Result{Allowed: o.Allowed, Limit: limits[j], Remaining: o.Remaining,
				RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond}
			if res[j] != w {
				t.Fatalf("seed %d step %d (now %d, cost %d, peek %v) limit %v:\n got %+v\nwant %+v", seed, i, now, n, peek, limits[j], res[j], w)
			}
		}
		for j := range limits {
			compareState(t, c, s, m, j, key, want[j])
		}
	}
}

// compareState checks that Redis holds exactly algo's state for limit j, and
// that a write set the expiry algo asks for.
func compareState(t *testing.T, c rueidis.Client, s *Store, m *model, j int, key string, o algo.Outcome) {
	t.Helper()
	rk := s.Key(key, m.limits[j])
	switch m.params[j].Alg {
	case ratewarden.FixedWindow, ratewarden.SlidingWindow:
		var got algo.Window
		if v, at, ok := readState(t, c, rk); ok {
			var err error
			if got, err = decodeWindow(m.params[j].Alg, v, at, m.limits[j].Period.Microseconds()); err != nil {
				t.Fatalf("%s: %v", rk, err)
			}
		}
		if got != m.win[j] {
			t.Fatalf("%s: state %+v, algo has %+v", rk, got, m.win[j])
		}
	case ratewarden.TokenBucket:
		var got algo.Bucket
		if v, at, ok := readState(t, c, rk); ok {
			var err error
			if got, err = decodeBucket(v, at); err != nil {
				t.Fatalf("%s: %v", rk, err)
			}
		}
		if got != m.tat[j] {
			t.Fatalf("%s: tat %+v, algo has %+v", rk, got, m.tat[j])
		}
	case ratewarden.SlidingLog:
		zs, err := c.Do(bg, c.B().Zrange().Key(rk).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil {
			t.Fatal(err)
		}
		got := make(algo.Log, 0, len(zs))
		members := map[string]bool{}
		for _, z := range zs {
			got = append(got, int64(z.Score))
			members[z.Member] = true
		}
		if !slices.Equal(got, m.log[j]) && !(len(got) == 0 && len(m.log[j]) == 0) {
			t.Fatalf("%s: log %v, algo has %v", rk, got, m.log[j])
		}
		if len(members) != len(zs) {
			t.Fatalf("%s: duplicate members", rk)
		}
	}
	if o.Wrote {
		at, err := c.Do(bg, c.B().Pexpiretime().Key(rk).Build()).AsInt64()
		if want := (o.ExpireAt + 999) / 1000; err != nil || at != want {
			t.Fatalf("%s: PEXPIRETIME %d (%v), want ceil(ExpireAt/1000) = %d", rk, at, err, want)
		}
	}
}

// readState returns a key's value and expiry (PEXPIRETIME, ms); ok is
// false when the key does not exist.
func readState(t *testing.T, c rueidis.Client, rk string) (v string, at int64, ok bool) {
	t.Helper()
	v, err := c.Do(bg, c.B().Get().Key(rk).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if at, err = c.Do(bg, c.B().Pexpiretime().Key(rk).Build()).AsInt64(); err != nil {
		t.Fatal(err)
	}
	return v, at, true
}

// decodeWindow reads a window's state of key format 2 (lua/state.lua) as
// algo keeps it, from the key's value v and expiry at (ms), independently
// of the script's loader. Compact forms: a fixed window's count, a sliding
// window's counts as prev*100+curr (both below 100, and only then),
// 10^4+prev*10^8+curr (both below 9*10^7, and only then) or "curr prev",
// the window start from the expiry. Long forms (Redis 6.2): "start count",
// "start curr prev".
func decodeWindow(alg ratewarden.Algorithm, v string, at, period int64) (algo.Window, error) {
	var w algo.Window
	f, err := parseInts(v)
	switch {
	case err != nil || at < 0:
		return w, fmt.Errorf("window state %q (expiry %d): %v", v, at, err)
	case alg == ratewarden.FixedWindow && len(f) == 1:
		return algo.Window{Start: at*1000 - period, Curr: f[0]}, nil
	case alg == ratewarden.FixedWindow && len(f) == 2:
		return algo.Window{Start: f[0], Curr: f[1]}, nil
	case alg == ratewarden.FixedWindow:
		return w, fmt.Errorf("fixed window state %q: want a count or \"start count\"", v)
	case len(f) == 1 && f[0] < 1e4:
		return algo.Window{Start: at*1000 - 2*period, Curr: f[0] % 100, Prev: f[0] / 100}, nil
	case len(f) == 1 && (f[0]-1e4)%1e8 < 9e7 && ((f[0]-1e4)%1e8 >= 100 || (f[0]-1e4)/1e8 >= 100):
		x := f[0] - 1e4
		return algo.Window{Start: at*1000 - 2*period, Curr: x % 1e8, Prev: x / 1e8}, nil
	case len(f) == 2 && (f[0] >= 9e7 || f[1] >= 9e7):
		return algo.Window{Start: at*1000 - 2*period, Curr: f[0], Prev: f[1]}, nil
	case len(f) == 3:
		return algo.Window{Start: f[0], Curr: f[1], Prev: f[2]}, nil
	}
	return w, fmt.Errorf("sliding window state %q: want prev*100+curr, 10^4+prev*10^8+curr, \"curr prev\" with a count of 9*10^7 or more, or \"start curr prev\"", v)
}

// decodeBucket reads a token bucket's state of key format 2: F*1000+d,
// with the key expiring at T (T+1 when F > 0) + d µs, a whole millisecond;
// or, written by Redis 6.2, "T F".
func decodeBucket(v string, at int64) (algo.Bucket, error) {
	f, err := parseInts(v)
	switch {
	case err != nil || at < 0:
		return algo.Bucket{}, fmt.Errorf("token bucket state %q (expiry %d): %v", v, at, err)
	case len(f) == 2:
		return algo.Bucket{T: f[0], F: f[1]}, nil
	case len(f) != 1:
		return algo.Bucket{}, fmt.Errorf("token bucket state %q: want F*1000+d or \"T F\"", v)
	}
	b := algo.Bucket{T: at*1000 - f[0]%1000, F: f[0] / 1000}
	if b.F > 0 {
		b.T--
	}
	return b, nil
}

// parseInts parses the non-negative integers of v, separated by single
// spaces.
func parseInts(v string) ([]int64, error) {
	var out []int64
	for _, p := range strings.Split(v, " ") {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != p {
			return nil, fmt.Errorf("%q is not a non-negative integer", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// longForms returns a script body that writes the long forms, as on Redis
// 6.2 (which has no PEXPIRETIME), on any server.
func longForms(tb testing.TB, body string) string {
	const compact = "local COMPACT = redis.REDIS_VERSION_NUM ~= nil"
	if strings.Count(body, compact) != 1 {
		tb.Fatalf("state.lua no longer decides its forms with %q", compact)
	}
	return strings.Replace(body, compact, "local COMPACT = false", 1)
}

// eitherEval runs each call through a or b at random: replicas of one
// version on a Redis that wrote half its state before an upgrade (6.2,
// long forms) and half after (compact forms).
type eitherEval struct {
	a, b evaluator
	r    *rand.Rand
}

func (e *eitherEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	if e.r.IntN(2) == 0 {
		return e.a.eval(ctx, keys, args, dst)
	}
	return e.b.eval(ctx, keys, args, dst)
}

func (e *eitherEval) del(ctx context.Context, keys []string) error { return e.a.del(ctx, keys) }

// TestDifferentialLongForms: the long forms that Redis 6.2 gets agree
// with algo bit for bit too.
func TestDifferentialLongForms(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := clockStore(t, newRueidisEval(c, testClockLua+longForms(t, checkBody), evalshaOnly))
	for seed := range sequences(100) {
		runDifferential(t, c, s, ev, 5000+seed, 40)
	}
}

// TestDifferentialMixedForms: checks that read either form and write
// either form, in any order on the same keys (a Redis upgraded from 6.2
// to 7 with its data), still agree with algo bit for bit.
func TestDifferentialMixedForms(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	mixed := &eitherEval{a: newRueidisEval(c, testClockLua+checkBody, evalshaOnly), b: newRueidisEval(c, testClockLua+longForms(t, checkBody), evalshaOnly), r: rand.New(rand.NewPCG(7, 7))}
	s, ev := clockStore(t, mixed)
	for seed := range sequences(100) {
		runDifferential(t, c, s, ev, 9000+seed, 40)
	}
}

func TestDifferential(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	const steps = 40
	for seed := range sequences(400) {
		runDifferential(t, c, s, ev, seed, steps)
	}
	if keys := do(t, srv, "DBSIZE"); keys == "0" {
		t.Fatal("the sequences wrote nothing")
	}
}

// TestDifferentialGoRedis runs sequences through the go-redis evaluator.
func TestDifferentialGoRedis(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = gc.Close() })
	s, ev := clockStore(t, &goRedisEval{c: gc, s: redis.NewScript(testClockLua + checkBody)})
	for seed := range uint64(40) {
		runDifferential(t, c, s, ev, 1000+seed, 30)
	}
}

func FuzzDifferential(f *testing.F) {
	srv := testredis.Start(f)
	c := newClient(f, srv.Addr)
	s, ev := newClockStore(f, c)
	for _, seed := range []uint64{1, 2, 3, 42, 1 << 40, 0xdeadbeef} {
		f.Add(seed, uint8(30))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		runDifferential(t, c, s, ev, seed, int(steps%64)+1)
	})
}

// TestSlidingLogClockStepsBack: when Redis' clock steps back, a new
// member's name can equal a live one; the script must still add one member
// per unit.
func TestSlidingLogClockStepsBack(t *testing.T) {
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 10, Period: 100 * time.Millisecond}
	base := time.Now().Add(time.Hour).UnixMicro()
	res := make([]ratewarden.Result, 1)
	for _, st := range []struct{ at, n int64 }{{10_000, 2}, {50_000, 1}, {111_000, 1}, {50_000, 1}} {
		ev.now = base + st.at
		if err := s.Check(bg, &ratewarden.Request{Key: "back", Limits: []ratewarden.Limit{lim}, Cost: st.n}, res); err != nil || !res[0].Allowed {
			t.Fatalf("at %d: %+v, %v", st.at, res[0], err)
		}
	}
	// Left: 50ms:2 and 111ms:1 from before, and the unit added last, whose
	// first-choice name 50ms:2 was taken.
	if n, err := c.Do(bg, c.B().Zcard().Key(s.Key("back", lim)).Build()).AsInt64(); err != nil || n != 3 {
		t.Fatalf("ZCARD = %d, %v; want 3", n, err)
	}
}

// TestSlidingLogLargeCost adds more members than one ZADD chunk and than
// Lua's unpack limit in one check.
func TestSlidingLogLargeCost(t *testing.T) {
	srv := testredis.Start(t)
	s := openStore(t, srv.Addr)
	lim := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: ratewarden.MaxLogRate, Period: time.Hour}
	res := make([]ratewarden.Result, 1)
	for _, n := range []int64{2500, ratewarden.MaxLogRate - 2500} {
		if err := s.Check(bg, &ratewarden.Request{Key: "big", Limits: []ratewarden.Limit{lim}, Cost: n}, res); err != nil || !res[0].Allowed {
			t.Fatalf("cost %d: %+v, %v", n, res[0], err)
		}
	}
	if got := do(t, srv, "ZCARD", s.Key("big", lim)); got != strconv.Itoa(ratewarden.MaxLogRate) {
		t.Fatalf("ZCARD = %s, want %d", got, ratewarden.MaxLogRate)
	}
	if err := s.Check(bg, &ratewarden.Request{Key: "big", Limits: []ratewarden.Limit{lim}, Cost: 1}, res); err != nil || res[0].Allowed || res[0].Remaining != 0 {
		t.Fatalf("full log: %+v, %v; want denied", res[0], err)
	}
	if s.Key("big", lim) != "rw:{big}l1h" {
		t.Fatal(s.Key("big", lim))
	}
}
