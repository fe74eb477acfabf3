package denycache_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/denycache"
	"github.com/ratewarden/ratewarden/memstore"
)

// A client over its limit is answered locally until its RetryAfter: the
// store (Redis, in production) is asked once.
func Example() {
	inner, err := memstore.New() // in production: the Redis script store (package stack builds the stack)
	if err != nil {
		log.Fatal(err)
	}
	st, err := denycache.New(inner)
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	// A bucket of 2 that refills one token per 30 minutes.
	bucket := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 2, Period: time.Hour}
	ctx := context.Background()
	for range 4 {
		r, err := lim.Allow(ctx, "client-42", bucket)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Source, r.RetryAfter.Round(time.Minute))
	}
	// Output:
	// true store 0s
	// true store 0s
	// false store 30m0s
	// false cache 30m0s
}

func ExampleNew() {
	inner, err := memstore.New() // in production: the Redis script store
	if err != nil {
		log.Fatal(err)
	}
	st, err := denycache.New(inner, denycache.WithMaxEntries(10_000))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	r, err := lim.Allow(context.Background(), "client-42", ratewarden.PerSecond(10))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed)
	_, err = denycache.New(inner, denycache.WithMaxEntries(0))
	fmt.Println(err)
	// Output:
	// true
	// denycache: max entries must be >= 1, got 0: invalid config
}

// Reset through the cache forgets the key's denials.
func ExampleStore_Reset() {
	inner, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	st, err := denycache.New(inner)
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	hourly := ratewarden.PerHour(1)
	if _, err := lim.Allow(ctx, "k", hourly); err != nil {
		log.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "k", hourly); err != nil { // denied by the store
		log.Fatal(err)
	}
	r, err := lim.Allow(ctx, "k", hourly)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Source)
	if err := lim.Reset(ctx, "k", hourly); err != nil {
		log.Fatal(err)
	}
	r, err = lim.Allow(ctx, "k", hourly)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.Source)
	// Output:
	// false cache
	// true store
}

func ExampleStore_Len() {
	inner, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	st, err := denycache.New(inner)
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"a", "b", "a", "b"} {
		if _, err := lim.Allow(ctx, key, ratewarden.PerHour(1)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(st.Len())
	// Output:
	// 2
}

func ExampleStore_Check() {
	inner, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	st, err := denycache.New(inner)
	if err != nil {
		log.Fatal(err)
	}
	daily := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1, Period: 24 * time.Hour}
	req := &ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{daily}, Cost: 1}
	res := make([]ratewarden.Result, 1)
	for range 3 {
		if err := st.Check(context.Background(), req, res); err != nil {
			log.Fatal(err)
		}
		fmt.Println(res[0].Allowed, res[0].Source)
	}
	// Output:
	// true store
	// false store
	// false cache
}
