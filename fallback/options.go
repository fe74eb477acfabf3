package fallback

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
)

// Defaults for New.
const (
	// DefaultTimeout bounds each call to the primary store. It is small on
	// purpose: a rate-limit decision that takes longer than this is worth
	// less than the failure policy's answer now.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultProbeInterval is how long the breaker stays open before it
	// lets a probe through.
	DefaultProbeInterval = time.Second
	// DefaultTripAfter is the number of consecutive failures that opens
	// the breaker.
	DefaultTripAfter = 5
	// DefaultTripRatio and DefaultTripMinRequests also open the breaker:
	// when at least DefaultTripMinRequests calls finished within the
	// window and at least this share of them failed.
	DefaultTripRatio       = 0.5
	DefaultTripMinRequests = 20
	// DefaultWindow is the rolling window the failure ratio is counted
	// over while the breaker is closed.
	DefaultWindow = 10 * time.Second
)

// Option configures a Store. Options that get an invalid value make New
// fail with an error wrapping ratewarden.ErrInvalidConfig that names the
// setting.
type Option func(*config)

type config struct {
	timeout       time.Duration
	policy        Policy
	policyFor     func(ratewarden.Limit) Policy
	replicas      int64
	retryAfter    time.Duration
	probeInterval time.Duration
	probes        uint32
	tripAfter     uint32
	tripRatio     float64
	tripMin       uint32
	window        time.Duration
	name          string
	logger        *slog.Logger
	onState       func(from, to State)
	onDegraded    func(Policy, error)
	local         ratewarden.Store
	err           error
}

func defaultConfig() config {
	return config{
		timeout:       DefaultTimeout,
		policy:        LocalFallback,
		replicas:      1,
		probeInterval: DefaultProbeInterval,
		probes:        1,
		tripAfter:     DefaultTripAfter,
		tripRatio:     DefaultTripRatio,
		tripMin:       DefaultTripMinRequests,
		window:        DefaultWindow,
		name:          "ratewarden",
		logger:        slog.Default(),
	}
}

// newConfig applies opts to the defaults and reports the first invalid one.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("fallback: nil Option: %w", ratewarden.ErrInvalidConfig)
		}
		o(&cfg)
	}
	return cfg, cfg.err
}

// fail records the first invalid option.
func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("fallback: "+format+": %w", append(args, ratewarden.ErrInvalidConfig)...)
	}
}

// WithTimeout sets the deadline of each call to the primary store
// (default DefaultTimeout); d must be > 0. An earlier deadline on the
// caller's context wins.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("timeout must be > 0, got %v", d)
			return
		}
		c.timeout = d
	}
}

// WithPolicy sets the failure policy (default LocalFallback).
func WithPolicy(p Policy) Option {
	return func(c *config) {
		if !p.valid() {
			c.fail("policy must be fail_open, fail_closed or local_fallback, got %v", p)
			return
		}
		c.policy = p
	}
}

// WithPolicyFunc chooses the failure policy per limit: fn is asked for each
// limit of a degraded check, and a result that is not a valid Policy means
// the WithPolicy one. Use it when, say, login attempts must fail closed and
// everything else may fail open. fn must be quick and safe for concurrent
// use; nil removes it.
//
// In a multi-limit check each limit is answered by its own policy, and the
// request is admitted only when all of them admit it: a FailClosed limit
// denies it, and then nothing is consumed from the local shares either.
func WithPolicyFunc(fn func(ratewarden.Limit) Policy) Option {
	return func(c *config) { c.policyFor = fn }
}

// WithReplicas sets how many replicas share each limit (default 1), for
// LocalFallback: each replica enforces Rate/n (rounded down, at least 1)
// per Period, and for TokenBucket a Burst of Burst/n likewise, so n
// replicas together admit at most the limit during an outage (n when Rate
// is below n, as every share is at least 1). n must be >= 1.
func WithReplicas(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("replicas must be >= 1, got %d", n)
			return
		}
		c.replicas = int64(n)
	}
}

// WithRetryAfter sets the RetryAfter of FailClosed denials. The default, 0,
// uses the time until the breaker's next probe (the probe interval when
// the breaker is not open). d must be >= 0.
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("retry after must be >= 0, got %v", d)
			return
		}
		c.retryAfter = d
	}
}

// WithProbeInterval sets how long the breaker stays open before it lets a
// probe call through (half-open); default DefaultProbeInterval, d must be
// > 0. The primary is back in use within about 2 × d + the timeout after it
// recovers (see the package doc).
func WithProbeInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("probe interval must be > 0, got %v", d)
			return
		}
		c.probeInterval = d
	}
}

// WithHalfOpenProbes sets how many probe calls the half-open breaker lets
// through, and how many must succeed in a row to close it (default 1);
// n must be >= 1. Any failed probe opens it again.
func WithHalfOpenProbes(n int) Option {
	return func(c *config) {
		if n < 1 || n > math.MaxUint32 {
			c.fail("half-open probes must be between 1 and %d, got %d", uint32(math.MaxUint32), n)
			return
		}
		c.probes = uint32(n)
	}
}

// WithTripAfter opens the breaker after n consecutive failed calls
// (default DefaultTripAfter); n must be >= 1.
func WithTripAfter(n int) Option {
	return func(c *config) {
		if n < 1 || n > math.MaxUint32 {
			c.fail("trip after must be between 1 and %d, got %d", uint32(math.MaxUint32), n)
			return
		}
		c.tripAfter = uint32(n)
	}
}

// WithTripRatio also opens the breaker when at least minRequests calls
// finished within the window (WithWindow) and at least ratio of them failed
// (defaults DefaultTripRatio, DefaultTripMinRequests). This catches a
// primary that fails often but not many times in a row. ratio must be in
// (0, 1] and minRequests >= 1.
func WithTripRatio(ratio float64, minRequests int) Option {
	return func(c *config) {
		switch {
		case !(ratio > 0 && ratio <= 1): // also rejects NaN
			c.fail("trip ratio must be in (0, 1], got %v", ratio)
		case minRequests < 1 || minRequests > math.MaxUint32:
			c.fail("trip ratio minimum requests must be between 1 and %d, got %d", uint32(math.MaxUint32), minRequests)
		default:
			c.tripRatio, c.tripMin = ratio, uint32(minRequests)
		}
	}
}

// WithWindow sets the rolling window (default DefaultWindow) over which
// the closed breaker counts calls for WithTripRatio, in ten buckets; d must
// be at least 10ms.
func WithWindow(d time.Duration) Option {
	return func(c *config) {
		if d < 10*time.Millisecond {
			c.fail("window must be >= 10ms, got %v", d)
			return
		}
		c.window = d
	}
}

// WithName names the store in log lines, for services with more than one
// (default "ratewarden").
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// WithLogger sets the logger for breaker state changes (default
// slog.Default()). Every change is one line: Warn when the breaker opens,
// Info otherwise, with the store name, the states and the policy; never a
// caller's key. l must not be nil; pass slog.New(slog.DiscardHandler) for
// silence.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("logger must not be nil (use slog.New(slog.DiscardHandler) to silence it)")
			return
		}
		c.logger = l
	}
}

// WithOnStateChange registers fn to be told of every breaker state change,
// in order. It runs on the goroutine of a call that noticed the change,
// after the breaker's lock was released, so it may call State; it must be
// quick. Nil removes it.
func WithOnStateChange(fn func(from, to State)) Option {
	return func(c *config) { c.onState = fn }
}

// WithOnDegraded registers fn to be told of every degraded Result: the
// policy that answered and why the primary did not (an error wrapping
// ratewarden.ErrStoreUnavailable; ErrOpen while the breaker is open). It
// runs on the caller's goroutine, once per limit of a degraded check, and
// must be quick; it is not given the key, which stays out of metrics and
// logs. Nil removes it.
func WithOnDegraded(fn func(p Policy, cause error)) Option {
	return func(c *config) { c.onDegraded = fn }
}

// WithLocalStore sets the in-process store that holds the local shares for
// LocalFallback. The default is a memstore.New() with its defaults (at most
// memstore.DefaultMaxKeys states); pass a memstore built with
// memstore.WithMaxKeys to bound it differently. st must not be nil.
func WithLocalStore(st ratewarden.Store) Option {
	return func(c *config) {
		if nilcheck.Is(st) {
			c.fail("local store must not be nil%s", nilcheck.Describe(st))
			return
		}
		c.local = st
	}
}
