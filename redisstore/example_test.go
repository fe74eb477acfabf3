package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// One rueidis client and one Store per process, shared by all goroutines.
// This is the bare script store; package stack puts the deny cache and a
// failure policy in front of it, the setup to run in production.
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	res, err := limiter.Allow(context.Background(), "user:42", ratewarden.PerMinute(100))
	if err != nil {
		log.Fatal(err) // Redis unavailable: wraps ratewarden.ErrStoreUnavailable
	}
	if !res.Allowed {
		fmt.Println("retry in", res.RetryAfter)
		return
	}
	fmt.Println("allowed, remaining", res.Remaining)
	// Output:
	// allowed, remaining 99
}

// An application that already has a go-redis client can reuse it.
func ExampleNewGoRedis() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := limiter.AllowAll(ctx, "tenant:7", 1, ratewarden.PerSecond(10), ratewarden.PerDay(10000))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Results[0].Remaining, d.Results[1].Remaining)
	// Output:
	// true 9 9999
}

// Keys keep the caller's key inside a Cluster hash tag; keys that would
// break the tag, or are long, are hashed.
func ExampleStore_Key() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // connects on first use only
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Key("user:42", ratewarden.PerMinute(100)))
	fmt.Println(store.Key("user:42", ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 10, Period: time.Second}))
	fmt.Println(store.Key("odd{key}", ratewarden.PerHour(500)))
	// Output:
	// rw:{user:42}t1m
	// rw:{user:42}s1s
	// rw:{#bdc165ef665f664248bc30eb4e45b49a}t1h
}

func ExampleWithPrefix() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client, redisstore.WithPrefix("staging:rl:"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Key("user:42", ratewarden.PerMinute(100)))

	_, err = redisstore.NewGoRedis(client, redisstore.WithPrefix("bad{"))
	fmt.Println(err)
	// Output:
	// staging:rl:{user:42}t1m
	// redisstore: prefix "bad{" must not contain '{' or '}' (they would break the key's hash tag): invalid config
}

// Code that builds Requests itself calls the Store directly. Check assumes a
// valid Request, as a ratewarden.Limiter hands it; validate one from
// elsewhere (an RPC, say) with ratewarden.ValidateRequest first.
func ExampleStore_Check() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	req := &ratewarden.Request{Key: "api-key:abc", Limits: []ratewarden.Limit{ratewarden.PerSecond(10), ratewarden.PerHour(1000)}, Cost: 1}
	if err := ratewarden.ValidateRequest(req); err != nil {
		log.Fatal(err)
	}
	res := make([]ratewarden.Result, len(req.Limits))
	if err := store.Check(context.Background(), req, res); err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Println(r.Limit, r.Allowed, r.Remaining)
	}
	// Output:
	// 10/1s true 9
	// 1000/1h true 999
}

func ExampleStore_Reset() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	perMinute, perDay := ratewarden.PerMinute(100), ratewarden.PerDay(1000)
	if _, err := limiter.AllowAll(ctx, "user:7", 10, perMinute, perDay); err != nil {
		log.Fatal(err)
	}
	// One DEL of rw:{user:7}s1m; the per-day state of
	// user:7 stays.
	if err := store.Reset(ctx, "user:7", perMinute); err != nil {
		log.Fatal(err)
	}
	d, err := limiter.AllowAll(ctx, "user:7", 0, perMinute, perDay) // cost 0: look only
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Results[0].Remaining, d.Results[1].Remaining)
	// Output:
	// 100 990
}

// Limiter.Wait on a token bucket reserves the units in Redis and sleeps
// until they are due: waiters on every replica are served in the order
// they reached Redis, without polling it.
func ExampleStore_Check_wait() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	vendor := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Second, Burst: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		res, err := limiter.Wait(ctx, "example:vendor-api", vendor)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("call the vendor; waited for a slot:", res.Delay > 0)
	}
	// Output:
	// call the vendor; waited for a slot: false
	// call the vendor; waited for a slot: true
}

// A cost known only afterwards (the tokens of a completion) is reserved on
// an estimate and settled with the actual cost: one charge script call
// gives the difference back, or charges it.
func ExampleStore_Charge() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tokens := ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 1000, Period: time.Minute}
	rv, err := limiter.Reserve(ctx, "example:tenant-7", 100, tokens)
	if err != nil || !rv.Allowed {
		log.Fatal(rv, err)
	}
	st, err := rv.Settle(ctx, 30) // the completion used 30 tokens
	if err != nil {
		log.Fatal(err)
	}
	res, err := limiter.Peek(ctx, "example:tenant-7", tokens)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("given back:", -st.Applied[0], "remaining:", res.Remaining)
	// Output:
	// given back: 70 remaining: 970
}

// At most 2 jobs of a tenant in flight on all replicas together; a
// replica that dies holding a permit frees it after the ttl.
func ExampleStore_Acquire() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var held []*ratewarden.Permit
	for range 3 {
		p, err := limiter.Acquire(ctx, "example:tenant-7:jobs", 2, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("acquired:", p.Acquired, "held:", p.Held)
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
	// acquired: true held: 1
	// acquired: true held: 2
	// acquired: false held: 2
}

// A key's permits live in one sorted set beside its rate limits, in the
// same Cluster slot.
func ExampleStore_PermitKey() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // connects on first use only
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.PermitKey("tenant:7"))
	fmt.Println(store.Key("tenant:7", ratewarden.PerSecond(10)))
	// Output:
	// rw:{tenant:7}p
	// rw:{tenant:7}t1s
}
