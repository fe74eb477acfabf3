package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/algo"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The differential test beyond admission: random sequences of checks,
// reservations (Request.MaxDelay) and signed charges (Store.Charge) go
// through internal/algo and through the scripts, which must agree bit for
// bit in every result, every applied count, every stored state and every
// expiry.

// allBuckets reports whether every limit of m is a token bucket.
func (m *model) allBuckets() bool {
	for _, p := range m.params {
		if p.Alg != ratewarden.TokenBucket {
			return false
		}
	}
	return true
}

// reserveCheck is the check of a Store on algo with MaxDelay maxDelay (µs):
// a plain check when it admits now or any limit is a window or a log;
// else, when the largest wait any bucket needs is within maxDelay, every
// bucket reserves n for now + that wait (algo.TokenBucketReserve).
func (m *model) reserveCheck(now, n int64, peek bool, maxDelay int64) []algo.Outcome {
	outs := m.check(now, n, peek) // consumes only when every limit admits now
	if maxDelay <= 0 || !m.allBuckets() {
		return outs
	}
	var delay int64
	for _, o := range outs {
		if !o.Allowed {
			delay = max(delay, o.RetryAfter)
		}
	}
	if delay == 0 || delay > maxDelay {
		return outs
	}
	for j := range m.limits {
		m.tat[j], outs[j] = algo.TokenBucketReserve(m.tat[j], now, m.params[j], n, delay, !peek)
	}
	return outs
}

// charge applies spent at now to every limit on algo, and stores what a
// store must: a state the charge leaves empty (a window with no count, a
// bucket or log that expires by now) is no state. It returns, per limit,
// the units applied, whether the state changed and its expiry.
func (m *model) charge(now int64, spent []algo.Charged) (applied []int64, changed []bool, expireAt []int64) {
	applied, changed, expireAt = make([]int64, len(m.limits)), make([]bool, len(m.limits)), make([]int64, len(m.limits))
	for j, p := range m.params {
		switch p.Alg {
		case ratewarden.FixedWindow, ratewarden.SlidingWindow:
			var w algo.Window
			w, applied[j], changed[j], expireAt[j] = algo.ChargeWindow(m.win[j], now, p, p.Alg == ratewarden.SlidingWindow, spent)
			if changed[j] && w.Curr == 0 && w.Prev == 0 {
				w, expireAt[j] = algo.Window{}, now // the same as no window
			}
			m.win[j] = w
		case ratewarden.TokenBucket:
			var b algo.Bucket
			b, applied[j], changed[j], expireAt[j] = algo.ChargeBucket(m.tat[j], now, p, spent)
			if changed[j] && expireAt[j] <= now {
				b = algo.Bucket{}
			}
			m.tat[j] = b
		case ratewarden.SlidingLog:
			m.log[j], applied[j], changed[j], expireAt[j] = algo.ChargeLog(append(algo.Log(nil), m.log[j]...), now, p, spent)
		}
	}
	return applied, changed, expireAt
}

// genBuckets draws 1–3 token buckets with distinct scopes.
func genBuckets(r *rand.Rand) []ratewarden.Limit {
	for {
		ls := genLimits(r)
		var out []ratewarden.Limit
		for _, l := range ls {
			if l.Algorithm == ratewarden.TokenBucket {
				out = append(out, l)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
}

// genMaxDelay draws a reservation's MaxDelay: none, a few emission
// intervals of a limit, up to its period, or the most there is; with
// nanoseconds that a store must round down.
func genMaxDelay(r *rand.Rand, limits []ratewarden.Limit) time.Duration {
	l := limits[r.IntN(len(limits))]
	iv := l.Period / time.Duration(l.Rate)
	var d time.Duration
	switch r.IntN(7) {
	case 0:
		return 0
	case 6:
		d = 1000 * iv
	case 1:
		d = time.Duration(r.Int64N(4*int64(iv) + 1))
	case 2:
		d = time.Duration(r.Int64N(int64(l.Period) + 1))
	case 3:
		d = ratewarden.MaxPeriod
	default:
		d = time.Duration(1+r.Int64N(8)) * iv
	}
	if r.IntN(3) == 0 {
		d += time.Duration(r.IntN(1000))
	}
	return min(d, ratewarden.MaxPeriod)
}

// genSpent draws 1–3 charges and refunds for a step at now: dated now,
// in the past (within two periods), or, for refunds, in the future at or
// around a reservation's TAT (tat, 0 for none).
func genSpent(r *rand.Rand, limits []ratewarden.Limit, now, tat int64) []ratewarden.Spent {
	l := limits[r.IntN(len(limits))]
	P := l.Period.Microseconds()
	iv := max(P/l.Rate, 1)
	out := make([]ratewarden.Spent, 1+r.IntN(3))
	for i := range out {
		var sp ratewarden.Spent
		switch r.IntN(8) {
		case 0:
			sp.Units = 1 + r.Int64N(min(l.Capacity(), 20_000))
		case 1:
			sp.Units = []int64{ratewarden.MaxRate, l.Capacity(), l.Rate}[r.IntN(3)]
		case 2, 3:
			sp.Units = 1 + r.Int64N(3)
		case 4:
			sp.Units = -(1 + r.Int64N(3))
		case 5:
			sp.Units = -(1 + r.Int64N(min(l.Capacity(), 20_000)))
		default:
			sp.Units = -[]int64{ratewarden.MaxRate, l.Capacity(), 1}[r.IntN(3)]
		}
		if l.Algorithm == ratewarden.SlidingLog && sp.Units > 3000 {
			sp.Units = 3000 // the log keeps one member per unit: keep sequences quick
		}
		var ago int64 // µs
		switch r.IntN(6) {
		case 0, 1:
		case 2:
			ago = r.Int64N(2*P + 1)
		case 3:
			ago = r.Int64N(min(P/4, 1_000_000) + 1)
		default:
			if sp.Units < 0 && tat > now {
				// A reservation given back, dated at its TAT, or a little
				// off it (half an interval either way is the edge).
				ago = now - tat
				switch r.IntN(4) {
				case 0:
					ago += r.Int64N(2*iv+1) - iv
				case 1:
					ago += []int64{-iv / 2, iv / 2, -iv/2 - 1, iv/2 + 1}[r.IntN(4)]
				}
				ago = min(ago, 0)
			} else if sp.Units < 0 {
				ago = -r.Int64N(2*iv + 1)
			}
		}
		sp.Ago = time.Duration(ago) * time.Microsecond
		if r.IntN(4) == 0 && ago != 0 {
			// Sub-µs parts: Ago counts in whole µs, rounded to zero.
			if ago > 0 {
				sp.Ago += time.Duration(r.IntN(1000))
			} else {
				sp.Ago -= time.Duration(r.IntN(1000))
			}
		}
		sp.Ago = max(min(sp.Ago, ratewarden.MaxPeriod), -ratewarden.MaxPeriod)
		out[i] = sp
	}
	return out
}

// beyondStats counts what the sequences exercised.
type beyondStats struct {
	reserved, reservedPeek, reserveDenied int64 // admissions ahead of time, peeked ones, denials past MaxDelay
	charges, refunds, givenBack, notNear  int64 // charge calls with units applied > 0 and < 0; future refunds taken and refused
	emptied                               int64 // states a refund left empty (no key)
}

func (b *beyondStats) String() string {
	return fmt.Sprintf("%d reservations ahead of time (%d peeked, %d denied past MaxDelay), %d charges and %d refunds applied, %d reservations given back (%d refused: not the TAT), %d states emptied",
		b.reserved, b.reservedPeek, b.reserveDenied, b.charges, b.refunds, b.givenBack, b.notNear, b.emptied)
}

// runBeyond runs steps random checks, reservations and charges on one
// key through algo and the scripts and fails at the first difference.
func runBeyond(t *testing.T, c rueidis.Client, s *Store, ev *atEval, seed uint64, steps int, st *beyondStats) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x5ce7_1e0f))
	var limits []ratewarden.Limit
	if r.IntN(3) == 0 {
		limits = genLimits(r)
	} else {
		limits = genBuckets(r)
	}
	m := newModel(limits)
	key := fmt.Sprintf("beyond:%d:%d", seed, runs.Add(1))
	// Logs of thousands of members take a while on a busy machine.
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	now := time.Now().Add(time.Hour).UnixMicro() + r.Int64N(1e12)
	res := make([]ratewarden.Result, len(limits))
	applied := make([]int64, len(limits))
	var tat int64 // the TAT the latest reservation left in limits[0], or 0
	for i := range steps {
		var n int64
		var peek bool
		var spent []ratewarden.Spent
		if tat > now+1 && r.IntN(3) == 0 {
			// Wait canceled before its slot: give the reservation back.
			now += r.Int64N(tat - now)
			spent = genSpent(r, limits, now, tat)
			spent = spent[:1]
			spent[0].Units = -max(-spent[0].Units, 1)
		} else {
			now, n, peek = genStep(r, now, limits)
			if r.IntN(5) < 2 {
				spent = genSpent(r, limits, now, tat)
			}
		}
		ev.now = now
		where := fmt.Sprintf("seed %d step %d (now %d, limits %v)", seed, i, now, limits)
		if spent != nil {
			if ratewarden.ValidateCharge(key, limits, spent) != nil {
				continue
			}
			dated := make([]algo.Charged, len(spent))
			for k, sp := range spent {
				dated[k] = algo.Charged{Units: sp.Units, At: now - sp.Ago.Microseconds()}
			}
			wantApplied, changed, expireAt := m.charge(now, dated)
			if err := s.Charge(ctx, key, limits, spent, applied); err != nil {
				t.Fatalf("%s: charge %+v: %v", where, spent, err)
			}
			st.count(m, now, spent, wantApplied, changed, expireAt)
			for j := range limits {
				if applied[j] != wantApplied[j] {
					t.Fatalf("%s: charge %+v, limit %v: applied %d, algo %d", where, spent, limits[j], applied[j], wantApplied[j])
				}
				compareState(t, c, s, m, j, key, algo.Outcome{})
				compareChargeExpiry(t, c, s.Key(key, limits[j]), now, changed[j], expireAt[j], where)
			}
			continue
		}
		maxDelay := genMaxDelay(r, limits)
		want := m.reserveCheck(now, n, peek, maxDelay.Microseconds())
		got, err := s.check(ctx, &ratewarden.Request{Key: key, Limits: limits, Cost: n, Peek: peek, MaxDelay: maxDelay}, res)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if got != now {
			t.Fatalf("%s: script decided at %d", where, got)
		}
		for j, o := range want {
			w := ratewarden.Result{Allowed: o.Allowed, Limit: limits[j], Remaining: o.Remaining,
				RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond, ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond,
				Delay: time.Duration(o.Delay) * time.Microsecond}
			if res[j] != w {
				t.Fatalf("%s: cost %d, peek %v, max delay %v, limit %v:\n got %+v\nwant %+v", where, n, peek, maxDelay, limits[j], res[j], w)
			}
			compareState(t, c, s, m, j, key, o)
		}
		switch {
		case want[0].Delay > 0 && peek:
			st.reservedPeek++
		case want[0].Delay > 0:
			st.reserved++
			tat = now + want[0].ResetAfter
		case maxDelay > 0 && !want[0].Allowed && m.allBuckets():
			st.reserveDenied++
		}
	}
}

// count adds a charge's effects to b.
func (b *beyondStats) count(m *model, now int64, spent []ratewarden.Spent, applied []int64, changed []bool, expireAt []int64) {
	for j := range m.limits {
		switch {
		case applied[j] > 0:
			b.charges++
		case applied[j] < 0:
			b.refunds++
		}
		if changed[j] && expireAt[j] <= now {
			b.emptied++
		}
	}
	if m.params[0].Alg != ratewarden.TokenBucket || len(spent) != 1 || spent[0].Ago >= 0 || spent[0].Units > 0 {
		return
	}
	if applied[0] < 0 {
		b.givenBack++
	} else if m.tat[0].T >= now {
		b.notNear++
	}
}

// compareChargeExpiry checks a key's expiry after a charge: the one the
// algorithm gives when the charge changed the state, no key when it left
// nothing.
func compareChargeExpiry(t *testing.T, c rueidis.Client, rk string, now int64, changed bool, expireAt int64, where string) {
	t.Helper()
	if !changed {
		return
	}
	at, err := c.Do(bg, c.B().Pexpiretime().Key(rk).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case expireAt <= now && at != -2:
		t.Fatalf("%s: %s: PEXPIRETIME %d after a charge that left no state, want no key (-2)", where, rk, at)
	case expireAt > now && at != (expireAt+999)/1000:
		t.Fatalf("%s: %s: PEXPIRETIME %d after a charge, want ceil(expireAt/1000) = %d", where, rk, at, (expireAt+999)/1000)
	}
}

func TestDifferentialBeyond(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	var st beyondStats
	for seed := range sequences(400) {
		runBeyond(t, c, s, ev, seed, 40, &st)
	}
	t.Log(&st)
	if st.reserved == 0 || st.reservedPeek == 0 || st.reserveDenied == 0 || st.charges == 0 || st.refunds == 0 || st.givenBack == 0 || st.notNear == 0 || st.emptied == 0 {
		t.Fatalf("the sequences missed a path: %v", &st)
	}
	if keys := do(t, srv, "DBSIZE"); keys == "0" {
		t.Fatal("the sequences wrote nothing")
	}
}

// TestDifferentialBeyondLongForms: the same on the long forms Redis 6.2
// gets.
func TestDifferentialBeyondLongForms(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	inner := newRueidisEval(c, testClockLua+longForms(t, checkBody), evalshaOnly)
	s, ev := clockStore(t, &longCharge{rueidisEval: inner, tb: t})
	var st beyondStats
	for seed := range sequences(100) {
		runBeyond(t, c, s, ev, 20_000+seed, 40, &st)
	}
	t.Log(&st)
}

// longCharge runs the other scripts with the long forms too.
type longCharge struct {
	*rueidisEval
	tb testing.TB
}

func (e *longCharge) rescript(body string) evaluator {
	return newRueidisEval(e.c, testClockLua+longForms(e.tb, body), evalshaOnly)
}

// TestDifferentialBeyondGoRedis runs sequences through the go-redis
// evaluator.
func TestDifferentialBeyondGoRedis(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = gc.Close() })
	s, ev := clockStore(t, &goRedisEval{c: gc, s: redis.NewScript(testClockLua + checkBody)})
	var st beyondStats
	for seed := range uint64(40) {
		runBeyond(t, c, s, ev, 40_000+seed, 30, &st)
	}
	t.Log(&st)
}

func FuzzDifferentialBeyond(f *testing.F) {
	srv := testredis.Start(f)
	c := newClient(f, srv.Addr)
	s, ev := newClockStore(f, c)
	for _, seed := range []uint64{1, 2, 3, 42, 1 << 40, 0xdeadbeef} {
		f.Add(seed, uint8(30))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		runBeyond(t, c, s, ev, seed, int(steps%64)+1, new(beyondStats))
	})
}

// The charge script's HORIZON is algo.ChargeHorizon.
func TestChargeHorizonConstant(t *testing.T) {
	src, err := os.ReadFile("lua/charge.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^local HORIZON = 2 \* (\d+)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("lua/charge.lua: no line `local HORIZON = 2 * <µs>`")
	}
	if v, _ := strconv.ParseInt(string(m[1]), 10, 64); 2*v != algo.ChargeHorizon {
		t.Fatalf("lua/charge.lua: HORIZON = 2 * %d, algo.ChargeHorizon = %d", v, algo.ChargeHorizon)
	}
}
