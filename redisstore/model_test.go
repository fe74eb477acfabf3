package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/refmodel"
	"github.com/ratewarden/ratewarden/internal/testredis"
	"github.com/redis/rueidis"
)

// refKey is one key under one limit on a test-clock Store (the production
// script with now taken from the test), for refmodel.RunCase.
type refKey struct {
	c   rueidis.Client
	s   *Store
	ev  *atEval
	key string
	lim ratewarden.Limit
	// wrote and expireAt: after a consuming step, the key's PEXPIRETIME
	// (in µs), so that RunCase checks the TTL outlives the state.
	wrote    bool
	expireAt int64
}

func (k *refKey) Do(now int64, op refmodel.Op) (refmodel.Answer, error) {
	k.ev.now = now
	res := make([]ratewarden.Result, 1)
	at, err := k.s.check(bg, &ratewarden.Request{Key: k.key, Limits: []ratewarden.Limit{k.lim}, Cost: op.N, Peek: !op.Consume}, res)
	if err != nil {
		return refmodel.Answer{}, err
	}
	if at != now {
		return refmodel.Answer{}, fmt.Errorf("the script decided at %d", at)
	}
	r := res[0]
	if r.Limit != k.lim || r.Source != ratewarden.SourceStore {
		return refmodel.Answer{}, fmt.Errorf("Result.Limit %v, Source %v; want %v, store", r.Limit, r.Source, k.lim)
	}
	k.wrote, k.expireAt = false, 0
	if r.Allowed && op.Consume && op.N > 0 {
		ms, err := k.c.Do(bg, k.c.B().Pexpiretime().Key(k.s.Key(k.key, k.lim)).Build()).AsInt64()
		if err != nil {
			return refmodel.Answer{}, fmt.Errorf("PEXPIRETIME: %v", err)
		}
		k.wrote, k.expireAt = true, ms*1000
	}
	us := func(d time.Duration) int64 {
		if d%time.Microsecond != 0 {
			return -1 // not whole µs: never the model's answer
		}
		return int64(d / time.Microsecond)
	}
	return refmodel.Answer{Allowed: r.Allowed, Remaining: r.Remaining, RetryAfter: us(r.RetryAfter), ResetAfter: us(r.ResetAfter)}, nil
}

// LastWrite reports the expiry of the key after a consuming step: the
// model must hold nothing any more at that instant (a TTL too short would
// forget admissions that still count).
func (k *refKey) LastWrite() (bool, int64) { return k.wrote, k.expireAt }

// redisModelCases is the number of random cases per algorithm.
const redisModelCases = 1000

// TestModelLua holds the Lua script to the exact reference model
// (internal/refmodel) in every field of every step of random sequences over
// the whole valid range of limits, on a real redis-server with the test
// clock, and checks the documented bounds and that every key's expiry
// outlives its state.
func TestModelLua(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	// Instants lie ahead of Redis' own clock, so the expiries the script
	// sets are in its future and keys stay readable.
	base := time.Now().Add(time.Hour).UnixMicro()
	cfg := refmodel.Config{MaxSteps: 40, Base: base, Spread: 100_000_000_000_000}
	refmodel.RunAll(t, redisModelCases, 0x6c7561, cfg, func(t *testing.T) func(refmodel.Case) (refmodel.System, string, func() error) {
		s, ev := newClockStore(t, c)
		return func(cs refmodel.Case) (refmodel.System, string, func() error) {
			alg := cs.Limit.Algorithm
			k := &refKey{c: c, s: s, ev: ev, key: fmt.Sprintf("model:%d:%d", alg, cs.I), lim: cs.Limit}
			return k, "key " + k.key, nil
		}
	})
}

// TestModelLuaRegressions runs the fixed regression sequences (float64
// arithmetic used to get them wrong) through the script, moved by whole
// periods into Redis' future.
func TestModelLuaRegressions(t *testing.T) {
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	from := time.Now().Add(time.Hour).UnixMicro()
	for i, sc := range refmodel.Regressions() {
		k := &refKey{c: c, s: s, ev: ev, key: fmt.Sprintf("model:regression:%d", i), lim: sc.Limit}
		if err := refmodel.RunScenario(sc, k, sc.Shift(from)); err != nil {
			t.Error(err)
		}
	}
}

// TestModelLuaSustainedRate: at 990,000/s, cost-1 requests sent at every
// µs until denied are admitted at the full rate, over 10 ms here (a script
// call per request; memstore and algo run the full simulated second).
func TestModelLuaSustainedRate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long model run on Redis; make test runs it")
	}
	t.Parallel() // the test clock: nothing here depends on timing
	srv := testredis.Start(t)
	c := newClient(t, srv.Addr)
	s, ev := newClockStore(t, c)
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 990_000, Period: time.Second}
	k := &refKey{c: c, s: s, ev: ev, key: "model:sustained", lim: lim}
	const span = 10_000 // µs
	n, err := refmodel.SustainedRate(lim, k, time.Now().Add(time.Hour).UnixMicro(), span)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: %d admitted in %d µs after the burst", lim, n, span)
}
