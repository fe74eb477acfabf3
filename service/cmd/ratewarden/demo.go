package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/demo"
)

// demoCmd runs `ratewarden demo`. isTerminal reports whether stderr is a
// terminal, for the progress bar.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: ratewarden demo [flags]

Starts API replicas behind a round-robin proxy on 127.0.0.1 and sends one
client's traffic twice: with a limiter in each replica's memory, then with
one shared limiter (a redis-server it starts, --redis, or else an
in-process ratewarden server). --race shows a naive GET-then-SET counter
next to the atomic script instead. Everything it starts is stopped when it
ends, also on Ctrl-C.

`)
		fs.PrintDefaults()
	}
	replicas := fs.Int("replicas", demo.DefaultReplicas, "API replicas behind the proxy")
	limitStr := fs.String("limit", "100/1m", `the client's limit, e.g. "100/1m" or "20/1m burst 20 token_bucket"`)
	algorithm := fs.String("algorithm", "", "token_bucket, fixed_window, sliding_window or sliding_log (default: the one in --limit, else sliding_log, which is exact and has no window boundary)")
	requests := fs.Int("requests", demo.DefaultRequests, "requests per run")
	concurrency := fs.Int("concurrency", demo.DefaultConcurrency, "requests in flight")
	redisURL := fs.String("redis", "", "use this Redis (redis://host:port) instead of starting redis-server")
	race := fs.Bool("race", false, "show the race of a naive GET-then-SET counter next to the atomic script (needs Redis)")
	attempts := fs.Int("race-attempts", demo.DefaultRaceAttempts, "naive runs at most, in --race mode, until one shows the race")
	chart := fs.String("chart", demo.DefaultChart, `SVG chart to write ("" for none)`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"replicas", *replicas}, {"requests", *requests}, {"concurrency", *concurrency}, {"race-attempts", *attempts}} {
		if f.v < 1 {
			fmt.Fprintf(stderr, "demo: --%s must be at least 1, got %d\n", f.name, f.v)
			return 2
		}
	}
	lim, err := demoLimit(*limitStr, *algorithm)
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	cfg := demo.Config{
		Replicas:     *replicas,
		Limit:        lim,
		Requests:     *requests,
		Concurrency:  *concurrency,
		RedisURL:     *redisURL,
		Race:         *race,
		RaceAttempts: *attempts,
		Chart:        *chart,
		Out:          stdout,
	}
	if isTerminal {
		cfg.Progress = stderr
	}
	if _, err := demo.Run(ctx, cfg); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "demo: interrupted; everything it started is stopped")
			return 1
		}
		fmt.Fprintf(stderr, "%v\n", err)
		if errors.Is(err, ratewarden.ErrInvalidConfig) || errors.Is(err, ratewarden.ErrInvalidLimit) {
			return 2
		}
		return 1
	}
	return 0
}

// demoLimit parses --limit with --algorithm: given alone, --algorithm
// sets the algorithm; a --limit naming another one is an error; with
// neither, the demo's exact default, sliding_log.
func demoLimit(limit, algorithm string) (ratewarden.Limit, error) {
	named := ""
	for _, f := range strings.Fields(limit) {
		if _, err := ratewarden.ParseAlgorithm(f); err == nil {
			named = f
		}
	}
	if algorithm != "" {
		if _, err := ratewarden.ParseAlgorithm(algorithm); err != nil {
			return ratewarden.Limit{}, fmt.Errorf("--algorithm: %w", err)
		}
	}
	switch {
	case algorithm != "" && named != "" && algorithm != named:
		return ratewarden.Limit{}, fmt.Errorf("--limit %q names %s but --algorithm says %s", limit, named, algorithm)
	case algorithm != "" && named == "":
		limit += " " + algorithm
	case named == "":
		limit += " " + ratewarden.SlidingLog.String()
	}
	lim, err := ratewarden.ParseLimit(limit)
	if err != nil {
		return lim, fmt.Errorf("--limit: %w", err)
	}
	return lim, nil
}

// stderrIsTerminal reports whether os.Stderr is a terminal (a character
// device), where a redrawn progress bar makes sense.
func stderrIsTerminal() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
