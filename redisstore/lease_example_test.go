package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore"
)

// A Lender is the Redis side of lease mode; package lease builds on it.
// A take of 50 units counts in Redis as a check of cost 50 would.
func ExampleNewLender() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	lender, err := redisstore.NewLender(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	quota := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	g, err := lender.Take(ctx, "lender-example", quota, 1, 50)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("taken:", g.Units, "left in Redis:", g.Remaining)

	// A plain check sees the 50 units as spent.
	res := make([]ratewarden.Result, 1)
	req := &ratewarden.Request{Key: "lender-example", Limits: []ratewarden.Limit{quota}, Peek: true}
	if err := store.Check(ctx, req, res); err != nil {
		log.Fatal(err)
	}
	fmt.Println("a check sees:", res[0].Remaining)
	// Output:
	// taken: 50 left in Redis: 950
	// a check sees: 950
}

// Take takes what is left, up to want, if at least need is; otherwise
// nothing, and says when need would fit. A token bucket's units fall due
// one emission interval apart from Due (here 0: the bucket was full).
func ExampleLender_Take() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	lender, err := redisstore.NewLender(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 10, Period: time.Hour}
	for _, ask := range []struct{ need, want int64 }{{1, 8}, {1, 8}, {3, 8}} {
		g, err := lender.Take(ctx, "take-example", bucket, ask.need, ask.want)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("need %d want %d: taken %d, left %d, due %v, retry after %v\n",
			ask.need, ask.want, g.Units, g.Remaining, g.Due.Round(time.Minute), g.RetryAfter.Round(time.Minute))
	}
	// Output:
	// need 1 want 8: taken 8, left 2, due 0s, retry after 0s
	// need 1 want 8: taken 2, left 0, due 48m0s, retry after 0s
	// need 3 want 8: taken 0, left 0, due 0s, retry after 18m0s
}

// GiveBack returns unused fixed-window units to the window they were
// taken from, never more than it counts.
func ExampleLender_GiveBack() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.NewGoRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	lender, err := redisstore.NewLender(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	quota := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1000, Period: time.Hour}
	g, err := lender.Take(ctx, "give-example", quota, 1, 50)
	if err != nil {
		log.Fatal(err)
	}
	// One unit was used and 49 go back. The count never goes below 0: a
	// second give-back of 10 finds 1 unit counted.
	for _, n := range []int64{49, 10} {
		back, err := lender.GiveBack(ctx, "give-example", quota, g.Window, n)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("given back:", back)
	}
	// Output:
	// given back: 49
	// given back: 1
}
