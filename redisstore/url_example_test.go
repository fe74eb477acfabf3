package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/redisstore"
)

// ParseURL turns a connection URL into rueidis options; a Sentinel URL
// names its sentinels and the primary's set.
func ExampleParseURL() {
	opt, err := redisstore.ParseURL("redis-sentinel://s1:26379,s2:26379,s3:26379/mymaster?client_name=api")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(opt.InitAddress, opt.Sentinel.MasterSet, opt.ClientName)

	_, err = redisstore.ParseURL("redis://127.0.0.1:6379?pool=3")
	fmt.Println(err)
	// Output:
	// [s1:26379 s2:26379 s3:26379] mymaster api
	// redisstore: connection URL: unknown parameter "pool": invalid config
}

// ClientFromURL connects, so it needs a running Redis; the Store goes on
// top of the client it returns.
func ExampleClientFromURL() {
	client, err := redisstore.ClientFromURL("redis://" + redisAddr + "/0")
	if err != nil {
		log.Fatal(err) // wraps ratewarden.ErrStoreUnavailable when nothing answers
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
	res, err := limiter.Allow(context.Background(), "url-example", ratewarden.PerSecond(5))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed, res.Remaining)
	// Output:
	// true 4
}
