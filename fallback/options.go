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
	// DefaultTripAfter is the number of round trips in a row that must
	// fail to open the breaker.
	DefaultTripAfter = 5
	// DefaultTripRatio and DefaultTripMinRequests also open the breaker:
	// when at least DefaultTripMinRequests round trips finished within
	// the window and at least this share of them failed.
	DefaultTripRatio       = 0.5
	DefaultTripMinRequests = 20
	// DefaultGrace is how long a key admitted locally during an outage
	// stays on its local share once the primary is back (WithGrace).
	DefaultGrace = 5 * time.Second
	// DefaultWindow is the rolling window the failure ratio is counted
	// over while the breaker is closed.
	DefaultWindow = 10 * time.Second
)

// Option configures a Store. Options only record their value; New
// validates the collected configuration and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting. When an option is
// given twice, the last one counts.
type Option func(*config)

type config struct {
	timeout       time.Duration
	policy        Policy
	policyFor     func(ratewarden.Limit) Policy
	replicas      int
	retryAfter    time.Duration
	probeInterval time.Duration
	probes        int
	tripAfter     int
	tripRatio     float64
	tripMin       int
	window        time.Duration
	name          string
	logger        *slog.Logger
	onState       func(from, to State)
	onDegraded    func(Policy, error)
	local         ratewarden.Store
	localSet      bool // WithLocalStore was given, so local must not be nil
	reconcileKeys int
	grace         time.Duration
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
		reconcileKeys: DefaultReconcileKeys,
		grace:         DefaultGrace,
	}
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("fallback: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// validate reports the first setting out of its range, by name.
func (c *config) validate() error {
	var detail string
	switch {
	case c.timeout <= 0:
		detail = fmt.Sprintf("timeout must be > 0, got %v", c.timeout)
	case !c.policy.valid():
		detail = fmt.Sprintf("policy must be fail_open, fail_closed or local_fallback, got %v", c.policy)
	case c.replicas < 1:
		detail = fmt.Sprintf("replicas must be >= 1, got %d", c.replicas)
	case c.retryAfter < 0:
		detail = fmt.Sprintf("retry after must be >= 0, got %v", c.retryAfter)
	case c.probeInterval <= 0:
		detail = fmt.Sprintf("probe interval must be > 0, got %v", c.probeInterval)
	case !inUint32(c.probes):
		detail = fmt.Sprintf("half-open probes must be between 1 and %d, got %d", uint32(math.MaxUint32), c.probes)
	case !inUint32(c.tripAfter):
		detail = fmt.Sprintf("trip after must be between 1 and %d, got %d", uint32(math.MaxUint32), c.tripAfter)
	case !(c.tripRatio > 0 && c.tripRatio <= 1): // also rejects NaN
		detail = fmt.Sprintf("trip ratio must be in (0, 1], got %v", c.tripRatio)
	case !inUint32(c.tripMin):
		detail = fmt.Sprintf("trip ratio minimum requests must be between 1 and %d, got %d", uint32(math.MaxUint32), c.tripMin)
	case c.window < 10*time.Millisecond:
		detail = fmt.Sprintf("window must be >= 10ms, got %v", c.window)
	case c.logger == nil:
		detail = "logger must not be nil (use slog.New(slog.DiscardHandler) to silence it)"
	case c.grace < 0:
		detail = fmt.Sprintf("grace must be >= 0, got %v", c.grace)
	case c.reconcileKeys < 0:
		detail = fmt.Sprintf("reconcile keys must be >= 0, got %d", c.reconcileKeys)
	case c.localSet && nilcheck.Is(c.local):
		detail = "local store must not be nil" + nilcheck.Describe(c.local)
	default:
		return nil
	}
	return fmt.Errorf("fallback: %s: %w", detail, ratewarden.ErrInvalidConfig)
}

// inUint32 reports whether n is a count gobreaker can hold: 1 to MaxUint32.
func inUint32(n int) bool { return n >= 1 && uint64(n) <= math.MaxUint32 }

// WithTimeout sets the deadline of each call to the primary store
// (default DefaultTimeout); d must be > 0. An earlier deadline on the
// caller's context wins.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithPolicy sets the failure policy (default LocalFallback).
func WithPolicy(p Policy) Option {
	return func(c *config) { c.policy = p }
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
// Concurrency limits (Store.Acquire) have no Limit to ask about: they get
// the WithPolicy policy.
func WithPolicyFunc(fn func(ratewarden.Limit) Policy) Option {
	return func(c *config) { c.policyFor = fn }
}

// WithReplicas sets how many replicas share each limit (default 1), for
// LocalFallback: each replica enforces Rate/n (rounded down, at least 1)
// per Period, and for TokenBucket a Burst of Burst/n likewise, so n
// replicas together admit at most the limit during an outage (n when Rate
// is below n, as every share is at least 1). n must be >= 1.
func WithReplicas(n int) Option {
	return func(c *config) { c.replicas = n }
}

// WithRetryAfter sets the RetryAfter of FailClosed denials. The default, 0,
// uses the time until the breaker's next probe (the probe interval when
// the breaker is not open). d must be >= 0.
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) { c.retryAfter = d }
}

// WithProbeInterval sets how long the breaker stays open before it lets a
// probe call through (half-open); default DefaultProbeInterval, d must be
// > 0. The primary is back in use within about 2 × d + the timeout after it
// recovers (see the package doc).
func WithProbeInterval(d time.Duration) Option {
	return func(c *config) { c.probeInterval = d }
}

// WithHalfOpenProbes sets how many probe calls the half-open breaker lets
// through, and how many must succeed in a row to close it (default 1);
// n must be >= 1. Any failed probe opens it again.
func WithHalfOpenProbes(n int) Option {
	return func(c *config) { c.probes = n }
}

// WithTripAfter opens the breaker after n round trips in a row failed
// (default DefaultTripAfter); n must be >= 1. Calls in flight together
// are one round trip: the first of them to finish is counted, the others
// not, so one stall that times out many calls at once is one failure.
func WithTripAfter(n int) Option {
	return func(c *config) { c.tripAfter = n }
}

// WithTripRatio also opens the breaker when at least minRequests round
// trips finished within the window (WithWindow) and at least ratio of them failed
// (defaults DefaultTripRatio, DefaultTripMinRequests). This catches a
// primary that fails often but not many times in a row. ratio must be in
// (0, 1] and minRequests >= 1.
func WithTripRatio(ratio float64, minRequests int) Option {
	return func(c *config) { c.tripRatio, c.tripMin = ratio, minRequests }
}

// WithWindow sets the rolling window (default DefaultWindow) over which
// the closed breaker counts calls for WithTripRatio, in ten buckets; d must
// be at least 10ms.
func WithWindow(d time.Duration) Option {
	return func(c *config) { c.window = d }
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
	return func(c *config) { c.logger = l }
}

// WithOnStateChange registers fn to be told of every breaker state change,
// in order. It runs on the goroutine of a call that noticed the change,
// after the breaker's lock was released, so it may call State; it must be
// quick. Nil removes it.
func WithOnStateChange(fn func(from, to State)) Option {
	return func(c *config) { c.onState = fn }
}

// WithOnDegraded registers fn to be told of every degraded Result: the
// policy that answered and why the primary did not: an error wrapping
// ratewarden.ErrStoreUnavailable (ErrOpen while the breaker is open), one
// wrapping ratewarden.ErrKeyState (the key's own state is unusable), or
// ErrRecovering (the key's grace after an outage). It
// runs on the caller's goroutine, once per limit of a degraded check and
// once per degraded Acquire, and must be quick; it is not given the key, which stays out of metrics and
// logs. Nil removes it.
func WithOnDegraded(fn func(p Policy, cause error)) Option {
	return func(c *config) { c.onDegraded = fn }
}

// WithLocalStore sets the in-process store that holds the local shares for
// LocalFallback. The default is a memstore.New() with its defaults (at most
// memstore.DefaultMaxKeys states); pass a memstore built with
// memstore.WithMaxKeys to bound it differently. st must not be nil. The
// local store also takes the settlements (Store.Charge) and holds the
// concurrency limits (Store.Acquire) of LocalFallback during an outage.
func WithLocalStore(st ratewarden.Store) Option {
	return func(c *config) { c.local, c.localSet = st, true }
}

// WithReconcileKeys sets how many keys' LocalFallback admissions and
// settlements (Store.Charge) the Store journals during an outage to write
// back to the primary when it returns (default DefaultReconcileKeys; 0
// turns the write-back off, and settlements the primary could not take
// are then the local share's only). Units for further keys are counted in
// the write-back's log line, not written. n must be >= 0.
func WithReconcileKeys(n int) Option {
	return func(c *config) { c.reconcileKeys = n }
}

// WithGrace sets how long, once the breaker has closed after an outage, a
// key that LocalFallback admitted during it stays on its local share
// (default DefaultGrace), while every replica writes its outage admissions
// back: the replicas' breakers close at different moments (each probes on
// its own, and a probe can fail behind the backlog a stalled Redis works
// off), and a replica deciding on the primary before the others have
// written back would admit what they are about to count. The local share
// never admits more than its part of the limit, so a longer grace only
// costs balance between replicas. d must be >= 0; 0 decides on the
// primary at once.
func WithGrace(d time.Duration) Option {
	return func(c *config) { c.grace = d }
}
