package xds_test

import (
	"context"
	"fmt"
	"time"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratewarden/ratewarden/service/xds"
)

// ExampleConvert checks RateLimitConfig resources as config files are
// checked: the first is a domain, the second is refused, naming itself.
func ExampleConvert() {
	good := &rlsconfpb.RateLimitConfig{Name: "edge-limits", Domain: "edge", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_SECOND, RequestsPerUnit: 10}},
	}}
	cfg, err := xds.Convert([]*rlsconfpb.RateLimitConfig{good}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	d := cfg.Domains["edge"].Descriptors[0]
	fmt.Println(d.Path, d.RateLimit.Limit)

	bad := &rlsconfpb.RateLimitConfig{Name: "typo", Domain: "edge", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconfpb.RateLimitPolicy{RequestsPerUnit: 10}}, // no unit
	}}
	_, err = xds.Convert([]*rlsconfpb.RateLimitConfig{bad}, false)
	fmt.Println(err)
	// Output:
	// remote_address 10/1s fixed_window
	// config: 1 problem
	//   xds resource "typo":5: descriptors[0].rate_limit.unit: unknown unit "unknown" (want second, minute, hour, day, week, month or year)
}

// ExampleNew makes a client whose updates go to a function (a server's
// SetConfig, in the service); Run streams until its context ends.
func ExampleNew() {
	apply := func(u xds.Update) error {
		fmt.Println("version", u.Version, "domains", len(u.Config.Domains))
		return nil
	}
	c, err := xds.New("127.0.0.1:1", apply, xds.WithNode("ratelimit-node", nil), xds.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = c.Run(ctx) // nothing listens there: it retries until ctx ends
	st := c.Status()
	fmt.Println("connected:", st.Connected, "version:", st.Version == "")
	// Output:
	// connected: false version: true
}

// ExampleParseMetadata reads CONFIG_GRPC_XDS_NODE_METADATA.
func ExampleParseMetadata() {
	fmt.Println(xds.ParseMetadata("zone=eu-1,cluster=edge,junk"))
	// Output:
	// map[cluster:edge zone:eu-1]
}
