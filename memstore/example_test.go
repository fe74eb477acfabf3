package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/memstore"
)

func ExampleNew() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		r, err := limiter.Allow(context.Background(), "user:42", ratewarden.PerMinute(2))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

func ExampleWithClock() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	lim := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 1, Period: time.Second}
	ctx := context.Background()

	r, err := limiter.Allow(ctx, "k", lim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed)
	r, err = limiter.Allow(ctx, "k", lim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed, r.RetryAfter)
	now = now.Add(r.RetryAfter)
	r, err = limiter.Allow(ctx, "k", lim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed)
	// Output:
	// true
	// false 1s
	// true
}

func ExampleWithMaxKeys() {
	store, err := memstore.New(memstore.WithMaxKeys(2), memstore.WithShards(1))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := limiter.Allow(context.Background(), k, ratewarden.PerHour(10)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(store.Len())
	// Output: 2
}

func ExampleWithMaxKeyBytes() {
	store, err := memstore.New(memstore.WithMaxKeyBytes(8))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r, err := limiter.Allow(ctx, "user:42", ratewarden.PerMinute(5)) // 7 bytes
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed)
	_, err = limiter.Allow(ctx, "user:1234567", ratewarden.PerMinute(5)) // 12 bytes
	fmt.Println(errors.Is(err, ratewarden.ErrInvalidKey))
	fmt.Println(err)
	fmt.Println(store.Len())
	// Output:
	// true
	// true
	// memstore: key is 12 bytes, longer than the 8-byte limit (WithMaxKeyBytes): invalid key
	// 1
}

func ExampleWithShards() {
	// A store for a few hot keys needs few shards; many busy keys spread
	// better over more.
	store, err := memstore.New(memstore.WithShards(256))
	fmt.Println(store != nil, err)
	_, err = memstore.New(memstore.WithShards(0))
	fmt.Println(errors.Is(err, ratewarden.ErrInvalidConfig))
	// Output:
	// true <nil>
	// true
}

func ExampleStore_Check() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	perSecond := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 2, Period: time.Second}
	perHour := ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: time.Hour}
	req := ratewarden.Request{Key: "k", Limits: []ratewarden.Limit{perSecond, perHour}, Cost: 2}
	res := make([]ratewarden.Result, 2)
	for range 2 {
		if err := store.Check(context.Background(), &req, res); err != nil {
			log.Fatal(err)
		}
		fmt.Println(res[0].Allowed, res[0].Remaining, res[1].Allowed, res[1].Remaining)
	}
	// Output:
	// true 0 true 98
	// false 0 true 98
}

func ExampleStore_Reset() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lim := ratewarden.PerMinute(1)
	if _, err := limiter.Allow(ctx, "k", lim); err != nil {
		log.Fatal(err)
	}
	r, err := limiter.Peek(ctx, "k", lim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed)
	if err := store.Reset(ctx, "k", lim); err != nil {
		log.Fatal(err)
	}
	r, err = limiter.Peek(ctx, "k", lim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Allowed)
	// Output:
	// false
	// true
}

func ExampleStore_Len() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := limiter.Allow(ctx, "a", ratewarden.PerMinute(5)); err != nil {
		log.Fatal(err)
	}
	if _, err := limiter.Allow(ctx, "a", ratewarden.PerHour(5)); err != nil { // another scope: another state
		log.Fatal(err)
	}
	if _, err := limiter.Allow(ctx, "b", ratewarden.PerMinute(5)); err != nil {
		log.Fatal(err)
	}
	if _, err := limiter.Peek(ctx, "c", ratewarden.PerMinute(5)); err != nil { // peeks store nothing
		log.Fatal(err)
	}
	fmt.Println(store.Len())
	// Output: 3
}

func ExampleStore_Close() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratewarden.New(store)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Close())
	_, err = limiter.Allow(context.Background(), "k", ratewarden.PerSecond(1))
	fmt.Println(errors.Is(err, ratewarden.ErrStoreUnavailable))
	// Output:
	// <nil>
	// true
}
