// Command memory measures the Redis memory each limiter keeps per limited
// key (INFO memory before and after, on a private redis-server it starts)
// and prints a markdown table: ratewarden's four algorithms next to
// go-redis/redis_rate, ulule/limiter and the floor, one counter string
// with a TTL.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/bench"
)

func main() {
	keys := flag.Int("keys", 20_000, "distinct limited keys")
	checks := flag.Int("checks", 5, "requests per key (all admitted)")
	rate := flag.Int64("rate", 100, "requests allowed per period")
	period := flag.Duration("period", time.Hour, "the limit's period: long enough that no key expires during a cell")
	flag.Parse()
	if err := run(*keys, *checks, *rate, *period); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

func run(keys, checks int, rate int64, period time.Duration) error {
	if keys < 1 || checks < 1 || int64(2*checks) > rate || period <= 0 {
		return fmt.Errorf("-keys and -checks must be at least 1, -rate at least twice -checks, -period positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := bench.StartRedis()
	if err != nil {
		return err
	}
	defer r.Stop()
	lim := bench.Limit{Rate: rate, Period: period}
	cells, err := bench.MeasureAllMemory(ctx, r, bench.MemoryContenders(checks), bench.MemoryKeys(keys), lim)
	if err != nil {
		return err
	}
	fmt.Printf("## Redis memory per limited key\n\nOne private redis-server (%s), %d CPU(s), %s; INFO memory used_memory after the requests minus before (on an empty database, with the contender's connections closed both times); one run.\n",
		r.Version(ctx), runtime.NumCPU(), runtime.Version())
	bench.MemoryMarkdown(os.Stdout, cells, lim)
	return ctx.Err()
}
