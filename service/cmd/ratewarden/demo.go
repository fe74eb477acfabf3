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

const demoHead = `usage: ratewarden demo [flags]

Starts API replicas behind a round-robin proxy on 127.0.0.1 and sends one
client's traffic twice: with a limiter in each replica's memory, then with
one shared limiter (a redis-server it starts, --redis, or else an
in-process ratewarden server). --race shows a naive GET-then-SET counter
next to the atomic script instead. It prints a report on stdout and writes
an SVG chart (--chart). Everything it starts is stopped when it ends, also
on Ctrl-C.
`

const demoExits = `  0  done
  1  failed (e.g. --race without Redis, the chart not written) or interrupted
  2  usage error, or a flag value out of range
`

// demoRange is a numeric flag of demo and its allowed values.
type demoRange struct {
	name     string
	v        *int
	min, max int
}

// demoCmd runs "ratewarden demo". isTerminal reports whether stderr is a
// terminal, for the progress bar.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	fs := newFlagSet("demo", demoHead, demoExits)
	replicas := fs.Int("replicas", demo.DefaultReplicas, fmt.Sprintf("API replicas behind the proxy, 1 to %d", demo.MaxReplicas))
	limitStr := fs.String("limit", "100/1m", `the client's limit, e.g. "100/1m" or "20/1m burst 20 token_bucket"`)
	algorithm := fs.String("algorithm", "", "token_bucket, fixed_window, sliding_window or sliding_log (default: the one in --limit, else sliding_log, which is exact and has no window boundary)")
	requests := fs.Int("requests", demo.DefaultRequests, fmt.Sprintf("requests per run, 1 to %d", demo.MaxRequests))
	concurrency := fs.Int("concurrency", demo.DefaultConcurrency, fmt.Sprintf("requests in flight, 1 to %d", demo.MaxConcurrency))
	redisURL := fs.String("redis", "", "use this Redis (redis://host:port) instead of starting redis-server")
	race := fs.Bool("race", false, "show the race of a naive GET-then-SET counter next to the atomic script (needs Redis: redis-server on PATH, or --redis)")
	attempts := fs.Int("race-attempts", demo.DefaultRaceAttempts, fmt.Sprintf("naive runs at most, in --race mode, until one shows the race, 1 to %d", demo.MaxRaceAttempts))
	chart := fs.String("chart", "", fmt.Sprintf(`SVG chart to write; "" writes none (default %s, with --race %s)`, demo.DefaultChart(false), demo.DefaultChart(true)))
	pos, code, done := parseCommand(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "demo", "unexpected arguments %q", pos)
	}
	for _, r := range []demoRange{
		{"replicas", replicas, 1, demo.MaxReplicas},
		{"requests", requests, 1, demo.MaxRequests},
		{"concurrency", concurrency, 1, demo.MaxConcurrency},
		{"race-attempts", attempts, 1, demo.MaxRaceAttempts},
	} {
		if *r.v < r.min || *r.v > r.max {
			return usageError(stderr, "demo", "--%s must be between %d and %d, got %d", r.name, r.min, r.max, *r.v)
		}
	}
	lim, err := demoLimit(*limitStr, *algorithm)
	if err != nil {
		return usageError(stderr, "demo", "%v", err)
	}
	if !flagGiven(fs, "chart") {
		*chart = demo.DefaultChart(*race)
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
	return demoRun(ctx, cfg, stderr)
}

// demoRun runs the demo and turns its error into words and an exit status.
func demoRun(ctx context.Context, cfg demo.Config, stderr io.Writer) int {
	_, err := demo.Run(ctx, cfg)
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "ratewarden demo: interrupted; everything it started is stopped")
		return exitError
	case errors.Is(err, demo.ErrNeedsRedis):
		fmt.Fprintln(stderr, "ratewarden demo: --race needs Redis: give --redis URL, or install redis-server (on PATH) for the demo to start")
		return exitError
	case errors.Is(err, ratewarden.ErrInvalidConfig) || errors.Is(err, ratewarden.ErrInvalidLimit):
		return usageError(stderr, "demo", "%s", strings.TrimPrefix(err.Error(), "demo: "))
	}
	fmt.Fprintf(stderr, "ratewarden demo: %s\n", strings.TrimPrefix(err.Error(), "demo: "))
	return exitError
}

// flagGiven reports whether the flag name was given on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
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
