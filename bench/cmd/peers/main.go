// Command peers runs the side-by-side comparison of ratewarden's Redis
// store with other Go rate limiters against a private redis-server, and
// prints markdown tables. make bench-peers runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/bench"
)

func main() {
	callers := flag.String("c", "1,16,64,256", "concurrent callers, comma-separated")
	reps := flag.Int("reps", 3, "repetitions of every cell (interleaved; medians are reported)")
	d := flag.Duration("d", time.Second, "duration of a many-keys cell (the others run half as long)")
	n := flag.Int64("n", 0, "if > 0, send exactly this many requests per cell instead of running for -d")
	verbose := flag.Bool("v", false, "print a progress line per cell on stderr")
	only := flag.String("only", "", "run only contenders whose name contains this")
	wls := flag.String("workloads", "", "run only workloads whose name contains this")
	flag.Parse()
	if err := run(*callers, *reps, *d, *n, *verbose, *only, *wls); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(callers string, reps int, d time.Duration, n int64, verbose bool, only, wls string) error {
	cfg := bench.Config{Reps: reps, Duration: d, Requests: n}
	if verbose {
		cfg.Progress = os.Stderr
	}
	for _, f := range strings.Split(callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-c: bad number %q", f)
		}
		cfg.Callers = append(cfg.Callers, n)
	}
	if reps < 1 || d <= 0 || n < 0 {
		return fmt.Errorf("-reps and -d must be positive, -n must not be negative")
	}
	for _, c := range bench.Contenders() {
		if strings.Contains(c.Name, only) {
			cfg.Contenders = append(cfg.Contenders, c)
		}
	}
	for _, w := range bench.Workloads() {
		if strings.Contains(w.Name, wls) {
			cfg.Workloads = append(cfg.Workloads, w)
		}
	}
	// SIGTERM too (kill, timeout, CI cancelling a job): stop cleanly, so
	// the deferred r.Stop takes redis-server down with us.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := bench.StartRedis()
	if err != nil {
		return err
	}
	defer r.Stop()
	s, err := bench.Run(ctx, r, cfg)
	if err != nil {
		return err
	}
	cells := fmt.Sprintf("many-keys cells of %v, the others half as long", d)
	if n > 0 {
		cells = fmt.Sprintf("cells of %d requests", n)
	}
	fmt.Printf("## ratewarden vs other Go rate limiters\n\nOne private redis-server on loopback (persistence off), %d CPU(s), GOMAXPROCS %d, %s; %s; %d interleaved repetitions per cell, medians (latency percentiles over all repetitions). C is the number of concurrent callers.\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), cells, reps)
	s.Markdown(os.Stdout)
	return ctx.Err()
}
