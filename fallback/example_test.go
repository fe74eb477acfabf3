package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/memstore"
)

// downStore returns a store that is unavailable, as Redis is during an
// outage: a closed memstore fails every call with ErrStoreUnavailable.
func downStore() ratewarden.Store {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Close(); err != nil {
		log.Fatal(err)
	}
	return m
}

var quiet = fallback.WithLogger(slog.New(slog.DiscardHandler))

// Four replicas share 100 per minute. With the shared store down, each
// replica admits its share: 25.
func Example() {
	st, err := fallback.New(downStore(), quiet,
		fallback.WithPolicy(fallback.LocalFallback),
		fallback.WithReplicas(4))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	admitted := 0
	var last ratewarden.Result
	for range 40 {
		last, err = lim.Allow(context.Background(), "client-42", ratewarden.PerMinute(100))
		if err != nil {
			log.Fatal(err) // never: an outage is an answer
		}
		if last.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("source:", last.Source, "degraded:", last.Degraded(), "share:", last.Limit)
	// Output:
	// admitted: 25
	// source: local_fallback degraded: true share: 25/1m sliding_window
}

func ExampleNew() {
	primary, err := memstore.New() // in production: redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	st, err := fallback.New(primary, quiet,
		fallback.WithTimeout(100*time.Millisecond), // memstore answers at once; Redis within this
		fallback.WithPolicy(fallback.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	r, err := lim.Allow(context.Background(), "k", ratewarden.PerSecond(10))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Source, r.Remaining)

	_, err = fallback.New(primary, fallback.WithReplicas(0))
	fmt.Println(err)
	fmt.Println(errors.Is(err, ratewarden.ErrInvalidConfig))
	// Output:
	// true store 9
	// fallback: replicas must be >= 1, got 0: invalid config
	// true
}

func ExampleParsePolicy() {
	p, err := fallback.ParsePolicy("fail_closed")
	fmt.Println(p, err)
	_, err = fallback.ParsePolicy("fail_safe")
	fmt.Println(err)
	// Output:
	// fail_closed <nil>
	// fallback: unknown policy "fail_safe" (want fail_open, fail_closed or local_fallback): invalid config
}

// A Policy reads from configuration text.
func ExamplePolicy_UnmarshalText() {
	var p fallback.Policy
	if err := p.UnmarshalText([]byte("local_fallback")); err != nil {
		log.Fatal(err)
	}
	fmt.Println(p == fallback.LocalFallback)
	// Output: true
}

func ExamplePolicy_String() {
	fmt.Println(fallback.FailOpen, fallback.FailClosed, fallback.LocalFallback)
	// Output: fail_open fail_closed local_fallback
}

func ExampleState_String() {
	fmt.Println(fallback.StateClosed, fallback.StateHalfOpen, fallback.StateOpen)
	// Output: closed half_open open
}

// Check is what a Limiter calls; a service building Requests itself can
// call it directly.
func ExampleStore_Check() {
	st, err := fallback.New(downStore(), quiet, fallback.WithPolicy(fallback.FailClosed), fallback.WithRetryAfter(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	res := make([]ratewarden.Result, 1)
	err = st.Check(context.Background(), &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{ratewarden.PerMinute(5)}, Cost: 1}, res)
	fmt.Println(err, res[0].Allowed, res[0].RetryAfter, res[0].Source)
	// Output: <nil> false 30s fail_closed
}

// Reset cannot reset the shared state while the store is down: it says so.
func ExampleStore_Reset() {
	st, err := fallback.New(downStore(), quiet)
	if err != nil {
		log.Fatal(err)
	}
	err = st.Reset(context.Background(), "k", ratewarden.PerMinute(5))
	fmt.Println(errors.Is(err, ratewarden.ErrStoreUnavailable))
	// Output: true
}

// State backs a readiness check.
func ExampleStore_State() {
	st, err := fallback.New(downStore(), quiet, fallback.WithTripAfter(2), fallback.WithProbeInterval(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if _, err := lim.Allow(context.Background(), "k", ratewarden.PerMinute(5)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("ready:", st.State() != fallback.StateOpen, st.State())
	// Output: ready: false open
}

// Login attempts fail closed; everything else falls back to the local share.
func ExampleWithPolicyFunc() {
	login := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5, Period: time.Minute}
	st, err := fallback.New(downStore(), quiet, fallback.WithPolicyFunc(func(l ratewarden.Limit) fallback.Policy {
		if l == login {
			return fallback.FailClosed
		}
		return 0 // the WithPolicy default, LocalFallback
	}))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	r1, err := lim.Allow(context.Background(), "alice", login)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := lim.Allow(context.Background(), "alice", ratewarden.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r1.Allowed, r1.Source)
	fmt.Println(r2.Allowed, r2.Source)
	// Output:
	// false fail_closed
	// true local_fallback
}

func ExampleWithOnStateChange() {
	st, err := fallback.New(downStore(), quiet, fallback.WithTripAfter(1),
		fallback.WithOnStateChange(func(from, to fallback.State) {
			fmt.Println("breaker:", from, "->", to)
		}))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := lim.Allow(context.Background(), "k", ratewarden.PerMinute(5)); err != nil {
		log.Fatal(err)
	}
	// Output: breaker: closed -> open
}

func ExampleWithOnDegraded() {
	st, err := fallback.New(downStore(), quiet, fallback.WithPolicy(fallback.FailOpen),
		fallback.WithOnDegraded(func(p fallback.Policy, cause error) {
			fmt.Println("degraded:", p, errors.Is(cause, ratewarden.ErrStoreUnavailable))
		}))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := lim.Allow(context.Background(), "k", ratewarden.PerMinute(5)); err != nil {
		log.Fatal(err)
	}
	// Output: degraded: fail_open true
}

// Breaker tuning for a primary that fails intermittently: open at 30% of
// at least 50 calls in 5s, or 3 failures in a row; probe every 500ms with
// 2 calls.
func ExampleWithTripRatio() {
	primary, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = fallback.New(primary, quiet,
		fallback.WithTripRatio(0.3, 50),
		fallback.WithWindow(5*time.Second),
		fallback.WithTripAfter(3),
		fallback.WithProbeInterval(500*time.Millisecond),
		fallback.WithHalfOpenProbes(2),
		fallback.WithName("redis-main"))
	fmt.Println(err)
	_, err = fallback.New(primary, fallback.WithTripRatio(1.5, 50))
	fmt.Println(err)
	// Output:
	// <nil>
	// fallback: trip ratio must be in (0, 1], got 1.5: invalid config
}

// The local shares can live in a memstore of your choosing, to bound its
// memory differently.
func ExampleWithLocalStore() {
	local, err := memstore.New(memstore.WithMaxKeys(10_000))
	if err != nil {
		log.Fatal(err)
	}
	st, err := fallback.New(downStore(), quiet, fallback.WithLocalStore(local))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := lim.Allow(context.Background(), "k", ratewarden.PerMinute(5)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(local.Len())
	// Output: 1
}

// One breaker per partition of the key space: on Redis Cluster, use
// redisstore.Slot to group keys by slot, so a failed primary degrades only
// the keys it held.
func ExampleNewPartitioned() {
	primary, err := memstore.New() // in production: redisstore.New(clusterClient)
	if err != nil {
		log.Fatal(err)
	}
	groups := func(key string) int { return int(key[0]) % 4 } // e.g. redisstore.Slot(key) / 4096
	st, err := fallback.NewPartitioned(primary, 4, groups, fallback.WithPolicy(fallback.LocalFallback))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	r, err := lim.Allow(context.Background(), "user:42", ratewarden.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Source, st.States())
	// Output: true store [closed closed closed closed]
}

// badKeyStore answers every check of key "bad" with ErrKeyState, as
// redisstore does for a key holding another type.
type badKeyStore struct{ ratewarden.Store }

func (b badKeyStore) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if req.Key == "bad" {
		return fmt.Errorf("redisstore: eval: a key of this check holds another type: %w", ratewarden.ErrKeyState)
	}
	return b.Store.Check(ctx, req, res)
}

// A key whose stored state is unusable is answered by the policy; the
// breaker stays closed and every other key is decided as usual.
func ExampleStore_KeyStateErrors() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	st, err := fallback.New(badKeyStore{m}, quiet, fallback.WithPolicy(fallback.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"bad", "bad", "good"} {
		r, err := lim.Allow(ctx, key, ratewarden.PerMinute(10))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(key, r.Allowed, r.Source)
	}
	fmt.Println("key state errors:", st.KeyStateErrors(), "breaker:", st.State())
	// Output:
	// bad false fail_closed
	// bad false fail_closed
	// good true store
	// key state errors: 2 breaker: closed
}

// switchable is a primary that can be taken down, and a Charger that adds
// up what is written back to it.
type switchable struct {
	*memstore.Store
	down    atomic.Bool
	charged atomic.Int64
}

func (s *switchable) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if s.down.Load() {
		return fmt.Errorf("primary: connection refused: %w", ratewarden.ErrStoreUnavailable)
	}
	return s.Store.Check(ctx, req, res)
}

func (s *switchable) Charge(_ context.Context, key string, limits []ratewarden.Limit, spent ...ratewarden.Spent) error {
	for _, sp := range spent {
		s.charged.Add(sp.Units)
	}
	return nil
}

// What LocalFallback admits during an outage is written back to the
// primary (a ratewarden.Charger, as redisstore is) once it is back.
func ExampleWithReconcileKeys() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	primary := &switchable{Store: m}
	st, err := fallback.New(primary, quiet, fallback.WithPolicy(fallback.LocalFallback),
		fallback.WithReconcileKeys(1000), fallback.WithTripAfter(1),
		fallback.WithProbeInterval(10*time.Millisecond), fallback.WithGrace(0))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	primary.down.Store(true)
	for range 3 {
		if _, err := lim.Allow(ctx, "client-42", ratewarden.PerMinute(100)); err != nil {
			log.Fatal(err)
		}
	}
	primary.down.Store(false)
	for i := 0; st.Reconciled() < 3 && i < 1000; i++ {
		time.Sleep(5 * time.Millisecond) // the breaker probes, closes, writes back
		if _, err := lim.Peek(ctx, "other", ratewarden.PerMinute(100)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("written back:", st.Reconciled(), "charged:", primary.charged.Load())
	// Output: written back: 3 charged: 3
}
