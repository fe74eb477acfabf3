package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/redisstore"
)

// Lease mode for a hot key: the replica takes 50 units at a time from
// Redis and answers from them locally. The check that takes a lease is
// answered by Redis (Source store); the next ones come from the lease.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.New(store, lease.WithSize(50))
	if err != nil {
		log.Fatal(err)
	}
	defer leased.Close(context.Background()) // gives unused units back
	limiter, err := ratewarden.New(leased)
	if err != nil {
		log.Fatal(err)
	}
	search := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10_000, Period: time.Minute}
	for range 3 {
		r, err := limiter.Allow(context.Background(), "search-api", search)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Source)
	}
	fmt.Println("leases held:", leased.Leases())
	// Output:
	// true store
	// true lease
	// true lease
	// leases held: 1
}

func ExampleWithSize() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr}) // connects on first use only
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	_, err = lease.New(store, lease.WithSize(0))
	fmt.Println(err)
	// Output:
	// lease: size must be at least 1, got 0: invalid config
}

// Only the limits the selector picks use leases; the others are plain
// checks of the Store.
func ExampleWithFilter() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.New(store, lease.WithFilter(func(l ratewarden.Limit) bool { return l.Rate >= 1000 }))
	if err != nil {
		log.Fatal(err)
	}
	defer leased.Close(context.Background())
	limiter, err := ratewarden.New(leased)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range []struct {
		key string
		lim ratewarden.Limit
	}{
		{"search", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 5000, Period: time.Minute}},
		{"login", ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10, Period: time.Minute}},
	} {
		for range 2 {
			r, err := limiter.Allow(context.Background(), c.key, c.lim)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(c.key, c.lim, r.Source)
		}
	}
	// Output:
	// search 5000/1m fixed_window store
	// search 5000/1m fixed_window lease
	// login 10/1m fixed_window store
	// login 10/1m fixed_window store
}

func ExampleWithMaxLeases() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	_, err = lease.New(store, lease.WithMaxLeases(-1))
	fmt.Println(err)
	// Output:
	// lease: max leases must be at least 1, got -1: invalid config
}

// Close gives the unused units of fixed-window leases back; a closed
// lease Store makes plain checks. Closing twice does nothing.
func ExampleStore_Close() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.New(store, lease.WithSize(50))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	quota := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	req := &ratewarden.Request{Key: "close-example", Limits: []ratewarden.Limit{quota}, Cost: 1}
	res := make([]ratewarden.Result, 1)
	if err := leased.Check(ctx, req, res); err != nil {
		log.Fatal(err)
	}
	fmt.Println(leased.Close(ctx), leased.Close(ctx))

	// The 49 units leased but not used are back in Redis: only 1 is spent.
	req.Peek = true
	if err := store.Check(ctx, req, res); err != nil {
		log.Fatal(err)
	}
	fmt.Println("remaining:", res[0].Remaining)
	// Output:
	// <nil> <nil>
	// remaining: 999
}

// Reset drops this replica's leases of the key and deletes its state in
// Redis.
func ExampleStore_Reset() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer leased.Close(context.Background())
	limiter, err := ratewarden.New(leased)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	search := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 10_000, Period: time.Minute}
	if _, err := limiter.Allow(ctx, "reset-example", search); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leases:", leased.Leases())
	if err := limiter.Reset(ctx, "reset-example", search); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leases after reset:", leased.Leases())
	// Output:
	// leases: 1
	// leases after reset: 0
}

// Check is what a Limiter calls; a service building Requests itself can
// call it directly.
func ExampleStore_Check() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer leased.Close(context.Background())
	req := &ratewarden.Request{Key: "check-example", Limits: []ratewarden.Limit{{Algorithm: ratewarden.TokenBucket, Rate: 100, Period: time.Hour}}, Cost: 1}
	if err := ratewarden.ValidateRequest(req); err != nil {
		log.Fatal(err)
	}
	res := make([]ratewarden.Result, 1)
	for range 2 {
		if err := leased.Check(context.Background(), req, res); err != nil {
			log.Fatal(err)
		}
		fmt.Println(res[0].Allowed, res[0].Source, res[0].Remaining)
	}
	// Output:
	// true store 99
	// true lease 98
}

func ExampleStore_Leases() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	leased, err := lease.New(store)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(leased.Leases())
	// Output:
	// 0
}
