// Package demo is `ratewarden demo`: it shows, on loopback, why a rate
// limit behind a load balancer needs one shared, atomic source of truth.
//
// Run starts N API replicas behind a round-robin reverse proxy (package
// fleet) and sends one client's traffic through the proxy twice:
//
//  1. local: every replica has its own in-memory limiter (memstore), so the
//     client gets the limit once per replica;
//  2. shared: every replica has its own connection to one shared store, so
//     the client gets the limit once in total.
//
// The shared store is an existing Redis (Config.RedisURL), else a
// redis-server the demo starts on a free loopback port when the binary is
// on PATH (internal/redisproc, the launcher the tests use), else a
// ratewarden server started in process, which the replicas call over its
// HTTP API (package apistore).
//
// In race mode (Config.Race) the two runs are instead a naive shared
// counter (package naive: GET, compare, SET from Go) and ratewarden's
// atomic script, both in Redis: the naive counter admits more than the
// limit when two replicas read the same count.
//
// The report is text on Config.Out and an SVG chart (package chart).
// docs/demo.md tells the story, and why the default limit counts with
// sliding_log: it is exact in every window of the period, wherever the
// run starts, so the demo prints the same numbers every time.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Defaults of Config.
const (
	DefaultReplicas     = 3
	DefaultRequests     = 1000
	DefaultConcurrency  = 16
	DefaultRaceAttempts = 5
)

// The file names of the chart by default, in the temporary directory (see
// DefaultChart): one for the local-vs-shared runs, one for race mode.
const (
	ChartName     = "ratewarden-demo.svg"
	RaceChartName = "ratewarden-demo-race.svg"
)

// DefaultChart is where the command writes the chart unless told: a file
// in os.TempDir(), never the current directory, named for the mode so
// that a --race run does not overwrite the other chart.
func DefaultChart(race bool) string {
	if race {
		return filepath.Join(os.TempDir(), RaceChartName)
	}
	return filepath.Join(os.TempDir(), ChartName)
}

// DefaultLimit is 100 per minute, counted by the exact sliding log (see the
// package documentation for why).
var DefaultLimit = ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 100, Period: time.Minute}

// Bounds on Config, to keep a demo a demo.
const (
	MaxReplicas     = 64
	MaxRequests     = 1_000_000
	MaxConcurrency  = 1024
	MaxRaceAttempts = 100
)

// Config describes one demo. The zero value of a field means its default.
type Config struct {
	// Replicas is the number of API replicas behind the proxy.
	Replicas int
	// Limit is the promised limit of the one client.
	Limit ratewarden.Limit
	// Requests is the number of requests the client sends per run.
	Requests int
	// Concurrency is the number of requests the client keeps in flight.
	Concurrency int
	// RedisURL uses an existing Redis (redisstore.ParseURL's grammar)
	// instead of starting redis-server.
	RedisURL string
	// Race runs the naive GET-then-SET counter against the atomic script
	// instead of local against shared. It needs Redis.
	Race bool
	// RaceAttempts bounds the naive runs: they stop at the first that
	// admits more than the limit.
	RaceAttempts int
	// Chart is the path of the SVG chart to write; "" writes none.
	Chart string
	// Out receives the report; nil discards it.
	Out io.Writer
	// Progress receives a progress bar while traffic runs (meant for a
	// terminal: it redraws one line with \r); nil shows none.
	Progress io.Writer
	// LookPath finds redis-server; default exec.LookPath. An error means
	// "not installed": the demo falls back to an in-process ratewarden
	// server (or, in race mode, fails).
	LookPath func(file string) (string, error)

	// afterRequest, when set, is called after each completed request of a
	// run (tests use it to cancel mid-run).
	afterRequest func(run string, done int)
}

// Run kinds, as they appear in RunResult.Name.
const (
	RunLocal  = "local"
	RunShared = "shared"
	RunNaive  = "naive"
	RunAtomic = "atomic"
)

// ReplicaCount is what one replica did during a run.
type ReplicaCount struct {
	Admitted, Rejected int
}

// RunResult is one run of the client's traffic through the proxy.
type RunResult struct {
	// Name is RunLocal, RunShared, RunNaive or RunAtomic.
	Name string
	// Label names the run and the limiter the replicas used, as the
	// table shows it.
	Label string
	// Attempt numbers the naive runs (1, 2, ...); 0 otherwise.
	Attempt int
	// Replicas counts per replica, as the responses reported it.
	Replicas []ReplicaCount
	// Admitted (200), Rejected (429) and Errors (anything else, or no
	// response) over all requests.
	Admitted, Rejected, Errors int
	// Expected is what a correct limiter admits in this run: the limit's
	// capacity once for a shared limiter, once per replica (of the
	// requests it received) for local ones.
	Expected int
	// Cumulative[i] is the number of requests admitted among the first
	// i+1 responses, in the order they arrived.
	Cumulative []int
	// Start and Duration of the run, by this process' clock.
	Start    time.Time
	Duration time.Duration
	// Counter is, for a naive run, the count Redis holds at the end: less
	// than Admitted when replicas overwrote each other's updates.
	Counter int
	// Note explains, when non-empty, why the result may legitimately
	// differ from Expected (a window boundary crossed, tokens refilled).
	Note string
}

// Report is what Run did.
type Report struct {
	Limit                           ratewarden.Limit
	Replicas, Requests, Concurrency int
	// Shared describes the shared state: "redis-server on 127.0.0.1:PORT
	// (started by the demo)", "Redis at URL", or "in-process ratewarden
	// server on 127.0.0.1:PORT (HTTP API)".
	Shared string
	// SharedKind is "redis-server", "redis" or "ratewarden-server".
	SharedKind string
	// Runs are local and shared, or (race mode) the naive attempts and
	// then atomic.
	Runs []RunResult
	// Race reports race mode (Config.Race).
	Race bool
	// RaceShown reports, in race mode, that a naive run admitted more than
	// the limit.
	RaceShown bool
	// Chart is the path of the chart written, if any.
	Chart string
	// Addrs lists every address the demo listened on (or started a
	// process on); all are closed when Run returns.
	Addrs []string
	// RedisPID is the process id of the redis-server the demo started;
	// it has exited when Run returns.
	RedisPID int
}

// Run lookup: what kind of shared state.
const (
	KindRedisServer = "redis-server"
	KindRedis       = "redis"
	KindServer      = "ratewarden-server"
)

// ErrNeedsRedis is returned by Run in race mode when there is no Redis.
var ErrNeedsRedis = errors.New("demo: race mode needs Redis: install redis-server (on PATH) or give a Redis URL")

func (c *Config) setDefaults() error {
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.Limit == (ratewarden.Limit{}) {
		c.Limit = DefaultLimit
	}
	if c.Requests == 0 {
		c.Requests = DefaultRequests
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.RaceAttempts == 0 {
		c.RaceAttempts = DefaultRaceAttempts
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.LookPath == nil {
		c.LookPath = exec.LookPath
	}
	switch {
	case c.Replicas < 1 || c.Replicas > MaxReplicas:
		return fmt.Errorf("demo: replicas must be between 1 and %d, got %d: %w", MaxReplicas, c.Replicas, ratewarden.ErrInvalidConfig)
	case c.Requests < 1 || c.Requests > MaxRequests:
		return fmt.Errorf("demo: requests must be between 1 and %d, got %d: %w", MaxRequests, c.Requests, ratewarden.ErrInvalidConfig)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("demo: concurrency must be between 1 and %d, got %d: %w", MaxConcurrency, c.Concurrency, ratewarden.ErrInvalidConfig)
	case c.RaceAttempts < 1 || c.RaceAttempts > MaxRaceAttempts:
		return fmt.Errorf("demo: race attempts must be between 1 and %d, got %d: %w", MaxRaceAttempts, c.RaceAttempts, ratewarden.ErrInvalidConfig)
	}
	if err := c.Limit.Validate(); err != nil {
		return fmt.Errorf("demo: limit: %w", err)
	}
	return nil
}

// Run runs the demo and writes its report to cfg.Out. It stops early, and
// cleans up, when ctx is done (Ctrl-C). Whatever happens, every server,
// connection and process it started is closed when it returns; the Report
// says which. It is nil only when cfg is invalid (an error wrapping
// ratewarden.ErrInvalidConfig or ErrInvalidLimit, before anything starts).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	rep := &Report{Limit: cfg.Limit, Replicas: cfg.Replicas, Requests: cfg.Requests, Concurrency: cfg.Concurrency, Race: cfg.Race}
	var cl cleanup
	defer cl.run()

	sh, err := startShared(ctx, &cfg, rep, &cl)
	if err != nil {
		return rep, err
	}
	printHeader(cfg.Out, &cfg, rep)

	id := runID()
	if cfg.Race {
		err = runRace(ctx, &cfg, rep, sh, id, &cl)
	} else {
		err = runLocalShared(ctx, &cfg, rep, sh, id, &cl)
	}
	if err != nil {
		return rep, err
	}
	var chartErr error // the table is worth printing even when the chart fails
	if cfg.Chart != "" {
		if chartErr = writeChart(cfg.Chart, rep); chartErr == nil {
			rep.Chart = cfg.Chart
		}
	}
	printReport(cfg.Out, rep)
	return rep, chartErr
}

func runLocalShared(ctx context.Context, cfg *Config, rep *Report, sh *shared, id string, cl *cleanup) error {
	local, err := localStores(cfg.Replicas)
	if err != nil {
		return err
	}
	res, err := runOnce(ctx, cfg, rep, RunLocal, "local (memory per replica)", local, "local-"+id)
	if err != nil {
		return err
	}
	rep.Runs = append(rep.Runs, res)

	stores, err := sh.stores(cfg.Replicas)
	if err != nil {
		return err
	}
	res, err = runOnce(ctx, cfg, rep, RunShared, "shared ("+sh.label()+")", stores, "shared-"+id)
	if err != nil {
		return err
	}
	rep.Runs = append(rep.Runs, res)
	return nil
}

func runRace(ctx context.Context, cfg *Config, rep *Report, sh *shared, id string, cl *cleanup) error {
	for a := 1; a <= cfg.RaceAttempts; a++ {
		stores, err := sh.naiveStores(cfg.Replicas)
		if err != nil {
			return err
		}
		clientKey := fmt.Sprintf("naive-%s-%d", id, a)
		res, err := runOnce(ctx, cfg, rep, RunNaive, fmt.Sprintf("naive GET+SET, attempt %d", a), stores, clientKey)
		if err != nil {
			return err
		}
		res.Attempt = a
		if res.Counter, err = sh.naiveCount(ctx, clientKey, cfg.Limit); err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, res)
		if res.Admitted > res.Expected {
			rep.RaceShown = true
			break
		}
	}
	stores, err := sh.stores(cfg.Replicas)
	if err != nil {
		return err
	}
	res, err := runOnce(ctx, cfg, rep, RunAtomic, "atomic script", stores, "atomic-"+id)
	if err != nil {
		return err
	}
	rep.Runs = append(rep.Runs, res)
	return nil
}

// runID makes the client keys of one demo unique, so that demos sharing a
// Redis (or run twice within a period) never see each other's counts.
func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// cleanup runs functions in reverse order of registration, once.
type cleanup struct {
	mu  sync.Mutex
	fns []func()
}

func (c *cleanup) add(fn func()) {
	c.mu.Lock()
	c.fns = append(c.fns, fn)
	c.mu.Unlock()
}

func (c *cleanup) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
