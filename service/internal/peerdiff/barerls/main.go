// Command barerls is the load test's baseline (TestLoadRatio): the
// library deciding behind the least an Envoy rate limit service does. It
// answers ShouldRateLimit by checking each descriptor's entries, joined
// into a key, against one limit (1,000,000,000 per hour, fixed window;
// 100 a day when the descriptor's first key is -over's) with one
// Limiter.Allow, on memstore or, with -redis, on the library's
// recommended Redis stack (package stack; -leases adds lease mode), and
// returns a status per descriptor. No config, no metrics, no headers: what is left is the
// library and gRPC, so the service's figure beside it is the price of
// being a service.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/stack"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "gRPC address to serve")
	redisURL := flag.String("redis", "", "Redis URL; empty: memstore")
	over := flag.String("over", "", "descriptors whose first key is this are limited to 100 a day")
	leases := flag.Int64("leases", 0, "with -redis: lease this many units of a key at a time (lease mode); 0: no leases")
	flag.Parse()
	st, closeStore, err := store(*redisURL, *leases)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()
	lim, err := ratewarden.New(st)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(g, &bare{
		lim:     lim,
		limit:   ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 1_000_000_000, Period: time.Hour},
		overKey: *over, overLimit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 100, Period: 24 * time.Hour},
	})
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		g.Stop()
	}()
	if err := g.Serve(ln); err != nil {
		log.Fatal(err)
	}
}

// store is memstore, or the Redis stack at url, with leases of that many
// units when leases > 0.
func store(url string, leases int64) (ratewarden.Store, func(), error) {
	if url == "" {
		st, err := memstore.New()
		if err != nil {
			return nil, nil, err
		}
		return st, func() { st.Close() }, nil
	}
	opt, err := redisstore.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, fmt.Errorf("redis: %w", err)
	}
	var opts []stack.Option
	if leases > 0 {
		opts = append(opts, stack.WithLeases(lease.WithSize(leases)))
	}
	st, err := stack.New(client, opts...)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return st, func() { _ = st.Close(context.Background()); client.Close() }, nil
}

// bare is the rate limit service: one Allow per descriptor.
type bare struct {
	rlspb.UnimplementedRateLimitServiceServer
	lim   *ratewarden.Limiter
	limit ratewarden.Limit
	// overKey's descriptors ("": none) are checked against overLimit.
	overKey   string
	overLimit ratewarden.Limit
}

func (b *bare) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for _, d := range req.GetDescriptors() {
		var key strings.Builder
		key.WriteString(req.GetDomain())
		for _, e := range d.GetEntries() {
			key.WriteString("/" + e.GetKey() + "=" + e.GetValue())
		}
		limit := b.limit
		if es := d.GetEntries(); b.overKey != "" && len(es) > 0 && es[0].GetKey() == b.overKey {
			limit = b.overLimit
		}
		res, err := b.lim.Allow(ctx, key.String(), limit)
		if err != nil {
			return nil, err
		}
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: uint32(min(res.Remaining, 1<<32-1))}
		if !res.Allowed {
			st.Code, resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}
