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
	// source: local_fallback degraded: true share: 25/1m
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

// switchable is a primary that can be taken down, and that adds up the
// units charged to it.
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

func (s *switchable) Charge(ctx context.Context, key string, limits []ratewarden.Limit, spent []ratewarden.Spent, applied []int64) error {
	if s.down.Load() {
		return fmt.Errorf("primary: connection refused: %w", ratewarden.ErrStoreUnavailable)
	}
	for _, sp := range spent {
		s.charged.Add(sp.Units)
	}
	return s.Store.Charge(ctx, key, limits, spent, applied)
}

func (s *switchable) Acquire(ctx context.Context, key, holder string, max int64, ttl time.Duration) (ratewarden.PermitResult, error) {
	if s.down.Load() {
		return ratewarden.PermitResult{}, fmt.Errorf("primary: connection refused: %w", ratewarden.ErrStoreUnavailable)
	}
	return s.Store.Acquire(ctx, key, holder, max, ttl)
}

func (s *switchable) Release(ctx context.Context, key, holder string) (bool, error) {
	if s.down.Load() {
		return false, fmt.Errorf("primary: connection refused: %w", ratewarden.ErrStoreUnavailable)
	}
	return s.Store.Release(ctx, key, holder)
}

// What LocalFallback admits during an outage is written back to the
// primary once it is back.
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

// A reservation admitted by the primary and settled while the primary is
// down: the refund cannot reach it, so it is journaled and written back
// when the primary returns, and the primary ends up counting the actual
// cost.
func ExampleStore_Charge() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	primary := &switchable{Store: m}
	st, err := fallback.New(primary, quiet, fallback.WithTripAfter(1),
		fallback.WithProbeInterval(10*time.Millisecond), fallback.WithGrace(0))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	perHour := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	rv, err := lim.Reserve(ctx, "tenant-7", 100, perHour) // an estimate of 100 tokens
	if err != nil {
		log.Fatal(err)
	}
	primary.down.Store(true)
	s, err := rv.Settle(ctx, 30) // the completion used 30: Reservation.Settle calls Charge
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("delta:", s.Delta, "applied by the local share:", s.Applied)

	primary.down.Store(false)
	for i := 0; primary.charged.Load() != -70 && i < 1000; i++ {
		time.Sleep(5 * time.Millisecond) // the breaker probes, closes, writes the refund back
		if _, err := lim.Peek(ctx, "other", perHour); err != nil {
			log.Fatal(err)
		}
	}
	r, err := lim.Peek(ctx, "tenant-7", perHour)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("used in the primary:", perHour.Rate-r.Remaining)
	// Output:
	// delta: -70 applied by the local share: [0]
	// used in the primary: 30
}

// Concurrency limits fail over too: with the primary down, LocalFallback
// holds this replica's share of the permits (10 among 4 replicas: 2).
func ExampleStore_Acquire() {
	st, err := fallback.New(downStore(), quiet, fallback.WithReplicas(4))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		p, err := lim.Acquire(context.Background(), "tenant-7:jobs", 10, time.Minute)
		if err != nil {
			log.Fatal(err) // never: an outage is an answer
		}
		fmt.Println(p.Acquired, p.Held, p.Source)
	}
	// Output:
	// true 1 local_fallback
	// true 2 local_fallback
	// false 2 local_fallback
}

// A permit held locally during an outage is released locally; one the
// primary holds cannot be released while it is down, and expires after
// its ttl.
func ExampleStore_Release() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	primary := &switchable{Store: m}
	st, err := fallback.New(primary, quiet, fallback.WithTripAfter(1))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	held, err := st.Acquire(ctx, "jobs", "worker-1", 5, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	primary.down.Store(true)
	local, err := st.Acquire(ctx, "jobs", "worker-2", 5, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(held.Source, local.Source)
	fmt.Println(st.Release(ctx, "jobs", "worker-2"))
	_, err = st.Release(ctx, "jobs", "worker-1")
	fmt.Println(errors.Is(err, ratewarden.ErrStoreUnavailable))
	// Output:
	// store local_fallback
	// true <nil>
	// true
}

// Extend keeps a long job's permit, wherever it is held.
func ExampleStore_Extend() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	st, err := fallback.New(m, quiet)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Acquire(ctx, "jobs", "worker-1", 5, time.Minute); err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Extend(ctx, "jobs", "worker-1", 10*time.Minute))
	fmt.Println(st.Extend(ctx, "jobs", "worker-9", 10*time.Minute)) // holds none
	// Output:
	// true <nil>
	// false <nil>
}

// A Partitioned store settles and holds permits on the partition of the
// key: a failed partition answers by its policy, the others by the
// primary.
func ExamplePartitioned_Acquire() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	primary := &switchable{Store: m}
	st, err := fallback.NewPartitioned(primary, 2, func(key string) int { return len(key) % 2 },
		quiet, fallback.WithPolicy(fallback.FailClosed), fallback.WithRetryAfter(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	primary.down.Store(true)
	p, err := lim.Acquire(context.Background(), "jobs", 5, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Acquired, p.RetryAfter, p.Source)
	// Output: false 1s fail_closed
}

// Charge on a Partitioned store goes through the partition of the key.
func ExamplePartitioned_Charge() {
	m, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	st, err := fallback.NewPartitioned(m, 4, func(key string) int { return len(key) % 4 }, quiet)
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	perMinute := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 100 << 20, Period: time.Minute} // bytes
	rv, err := lim.Reserve(ctx, "download:42", 1<<20, perMinute)
	if err != nil {
		log.Fatal(err)
	}
	s, err := rv.Settle(ctx, 300<<10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Delta, s.Applied)
	// Output: -741376 [-741376]
}
