package stack_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/stack"
)

// newClient connects to the example Redis.
func newClient() rueidis.Client {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	return client
}

// The production setup: one client and one Stack per process, shared by
// every goroutine. A client over its limit is then answered by the deny
// cache, without a script call.
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(
		fallback.WithPolicy(fallback.LocalFallback), // while Redis is down: this replica's share
		fallback.WithReplicas(4),                    // of 4 replicas
	))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	daily := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: 24 * time.Hour}
	for range 4 {
		r, err := limiter.Allow(context.Background(), "example:new", daily)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Source)
	}
	// Output:
	// true store
	// true store
	// false store
	// false cache
}

// An application that already has a go-redis client reuses it.
func ExampleNewGoRedis() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := stack.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.AllowAll(context.Background(), "example:go-redis", 1, ratewarden.PerSecond(10), ratewarden.PerDay(10000))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Results[0].Remaining, d.Results[1].Remaining)
	// Output:
	// true 9 9999
}

// Without the deny cache every denial is Redis'.
func ExampleWithDenyCache() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithDenyCache(0))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.DenyCache() == nil)
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	daily := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: 24 * time.Hour}
	for range 3 {
		r, err := limiter.Allow(context.Background(), "example:no-cache", daily)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Source)
	}
	_, err = stack.New(client, stack.WithDenyCache(-1))
	fmt.Println(err)
	// Output:
	// true
	// true store
	// false store
	// false store
	// stack: deny cache size must be >= 0 (0 turns it off), got -1: invalid config
}

// WithRedis configures the script store: here, a key prefix per
// environment.
func ExampleWithRedis() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithRedis(redisstore.WithPrefix("staging:rl:")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Script().Key("user:42", ratewarden.PerMinute(100)))
	_, err = stack.New(client, stack.WithRedis(redisstore.WithBatchSize(0)))
	fmt.Println(err)
	// Output:
	// staging:rl:{user:42}t1m
	// redisstore: batch size must be at least 1, got 0: invalid config
}

// While Redis cannot be reached, the failure policy answers, and the
// Result says so.
func ExampleWithFallback() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now: Redis is down
	client := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := stack.NewGoRedis(client, stack.WithFallback(
		fallback.WithPolicy(fallback.FailClosed),
		fallback.WithRetryAfter(time.Second),
		fallback.WithLogger(nil), // an invalid option: New says which
	))
	fmt.Println(err)
	st, err = stack.NewGoRedis(client, stack.WithFallback(
		fallback.WithPolicy(fallback.FailClosed),
		fallback.WithRetryAfter(time.Second),
		fallback.WithTimeout(time.Second),
	))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	r, err := limiter.Allow(context.Background(), "example:down", ratewarden.PerMinute(100))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Source, r.RetryAfter, r.Source.Degraded())
	// Output:
	// fallback: logger must not be nil (use slog.New(slog.DiscardHandler) to silence it): invalid config
	// false fail_closed 1s true
}

// On a Redis Cluster client each front keeps one breaker per group of
// slots; off a Cluster, as here, there is one.
func ExampleWithSlotGroups() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithSlotGroups(4))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.States())
	_, err = stack.New(client, stack.WithSlotGroups(0))
	fmt.Println(err)
	// Output:
	// [closed]
	// stack: slot groups must be between 1 and 16384, got 0: invalid config
}

// A service whose limits each choose a failure policy makes one front per
// policy. The fronts share the script store and the deny cache: a denial
// learned through one is answered locally through the other.
func ExampleStack_NewFront() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	open, err := st.NewFront(fallback.WithPolicy(fallback.FailOpen), fallback.WithName("fail_open"))
	if err != nil {
		log.Fatal(err)
	}
	closed, err := st.NewFront(fallback.WithPolicy(fallback.FailClosed), fallback.WithName("fail_closed"))
	if err != nil {
		log.Fatal(err)
	}
	lenient, err := ratewarden.New(open)
	if err != nil {
		log.Fatal(err)
	}
	strict, err := ratewarden.New(closed)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	daily := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: 24 * time.Hour}
	for _, l := range []*ratewarden.Limiter{lenient, lenient, strict} {
		r, err := l.Allow(ctx, "example:fronts", daily)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Source)
	}
	fmt.Println(open.State(), closed.States())
	// Output:
	// true store
	// false store
	// false cache
	// closed [closed]
}

// Reset through the stack clears the key in Redis and in the deny cache.
func ExampleStack_Reset() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	daily := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: 24 * time.Hour}
	for range 3 {
		if _, err := limiter.Allow(ctx, "example:reset", daily); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(st.DenyCache().Len())
	if err := limiter.Reset(ctx, "example:reset", daily); err != nil {
		log.Fatal(err)
	}
	r, err := limiter.Allow(ctx, "example:reset", daily)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.DenyCache().Len(), r.Allowed, r.Source)
	// Output:
	// 1
	// 0 true store
}

// Lease mode answers a hot key from capacity leased in batches: three
// script calls take 50 units each, and the other 117 checks are admitted
// from them without Redis.
func ExampleWithLeases() {
	client := newClient()
	defer client.Close()
	ctx := context.Background()
	st, err := stack.New(client, stack.WithLeases(lease.WithSize(50)))
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := st.Close(ctx); err != nil { // gives unused units back
			log.Print(err)
		}
	}()
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	hot := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	sources := map[ratewarden.Source]int{}
	for range 120 {
		r, err := limiter.Allow(ctx, "example:leases", hot)
		if err != nil {
			log.Fatal(err)
		}
		sources[r.Source]++
	}
	fmt.Println("from Redis:", sources[ratewarden.SourceStore], "from leases:", sources[ratewarden.SourceLease])
	// Output:
	// from Redis: 3 from leases: 117
}

// Close gives the units a replica leased but did not use back to Redis.
func ExampleStack_Close() {
	client := newClient()
	defer client.Close()
	ctx := context.Background()
	// A generous deadline: a first call slower than the default 50ms (a
	// busy machine, the script not loaded yet) would be answered by the
	// failure policy while Redis still takes the lease, and the counts
	// below would depend on the machine.
	st, err := stack.New(client, stack.WithLeases(lease.WithSize(50)), stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	redisView, err := ratewarden.New(st.Script()) // what Redis holds, past every local layer
	if err != nil {
		log.Fatal(err)
	}
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	for range 10 {
		if _, err := limiter.Allow(ctx, "example:close", daily); err != nil {
			log.Fatal(err)
		}
	}
	r, err := redisView.Peek(ctx, "example:close", daily)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left in Redis while leased:", r.Remaining)
	if err := st.Close(ctx); err != nil {
		log.Fatal(err)
	}
	r, err = redisView.Peek(ctx, "example:close", daily)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left in Redis after Close:", r.Remaining)
	// Output:
	// left in Redis while leased: 950
	// left in Redis after Close: 990
}

// An LLM gateway reserves an estimate of tokens and settles the actual
// count when the completion ends: Reservation.Settle charges the
// difference through the stack (Stack.Charge), and a refund also makes
// the deny cache forget the key's denial.
func ExampleStack_Charge() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tokens := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: time.Hour}
	rv, err := limiter.Reserve(ctx, "example:charge", 100, tokens) // the estimate
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reserved:", rv.Allowed, rv.Results[0].Remaining)
	s, err := rv.Settle(ctx, 30) // the completion used 30 tokens
	if err != nil {
		log.Fatal(err)
	}
	r, err := limiter.Peek(ctx, "example:charge", tokens)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("settled:", s.Delta, s.Applied, "remaining:", r.Remaining)
	// Output:
	// reserved: true 900
	// settled: -70 [-70] remaining: 970
}

// At most 2 jobs of a tenant in flight, across every replica: the permits
// are held in Redis, each expiring after its ttl unless released.
func ExampleStack_Acquire() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var held []*ratewarden.Permit
	for range 3 {
		p, err := limiter.Acquire(ctx, "example:acquire", 2, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.Acquired, p.Held, p.Source)
		if p.Acquired {
			held = append(held, p)
		}
	}
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// true 1 store
	// true 2 store
	// false 2 store
}

// Release frees a permit at once, for the next holder.
func ExampleStack_Release() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Acquire(ctx, "example:release", "worker-1", 1, time.Minute); err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Release(ctx, "example:release", "worker-1"))
	fmt.Println(st.Release(ctx, "example:release", "worker-1")) // held no more
	pr, err := st.Acquire(ctx, "example:release", "worker-2", 1, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(pr.Acquired)
	if _, err := st.Release(ctx, "example:release", "worker-2"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// true <nil>
	// false <nil>
	// true
}

// Extend keeps the permit of a job that outlasts its ttl.
func ExampleStack_Extend() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, err := limiter.Acquire(ctx, "example:extend", 1, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Extend(ctx, time.Minute))
	fmt.Println(p.Release(ctx))
	// Output:
	// <nil>
	// <nil>
}

// Each front settles and holds permits through its own failure policy.
func ExampleFront_Charge() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	closed, err := st.NewFront(fallback.WithPolicy(fallback.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(closed)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	kib := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 4096, Period: time.Minute} // KiB per minute
	rv, err := limiter.Reserve(ctx, "example:front-charge", 64, kib)
	if err != nil {
		log.Fatal(err)
	}
	s, err := rv.Settle(ctx, 80) // the download was larger
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Delta, s.Applied)
	// Output: 16 [16]
}

// A front's permits are the same Redis permits as any other front's.
func ExampleFront_Acquire() {
	client := newClient()
	defer client.Close()
	st, err := stack.New(client, stack.WithFallback(fallback.WithTimeout(10*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	open, err := st.NewFront(fallback.WithPolicy(fallback.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a, err := st.Acquire(ctx, "example:front-acquire", "worker-1", 1, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	b, err := open.Acquire(ctx, "example:front-acquire", "worker-2", 1, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Acquired, b.Acquired, b.Source)
	if _, err := st.Release(ctx, "example:front-acquire", "worker-1"); err != nil {
		log.Fatal(err)
	}
	// Output: true false store
}
