// Package backend builds the stores the service decides on: the in-memory
// store for a single node, or the library's Redis stack (package stack;
// standalone, Sentinel or Cluster URL) with one failure-policy front per
// failure policy over one script store and one deny cache.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/stack"
)

// Memory is a single-node backend: one in-process store for every limit.
// It has no failure modes, so every failure policy gets the same store.
type Memory struct{ st *memstore.Store }

// NewMemory returns a Memory backend whose store takes keys of up to
// StoreKeyBytes(maxKeyBytes) bytes: every key the server lets through when
// it caps callers' keys at maxKeyBytes (0: memstore's default cap).
func NewMemory(maxKeyBytes int) (*Memory, error) {
	var opts []memstore.Option
	if maxKeyBytes > 0 {
		opts = append(opts, memstore.WithMaxKeyBytes(StoreKeyBytes(maxKeyBytes)))
	}
	st, err := memstore.New(opts...)
	if err != nil {
		return nil, err
	}
	return &Memory{st: st}, nil
}

// StoreKeyBytes is the longest store key the server builds from caller
// keys of at most maxKeyBytes bytes: Envoy descriptor keys are URL-escaped
// (a byte can become three) after the domain, and HTTP keys get a policy
// prefix; 1 KiB covers the prefixes and separators.
func StoreKeyBytes(maxKeyBytes int) int { return 3*maxKeyBytes + 1024 }

// Store returns the in-memory store.
func (m *Memory) Store(config.FailurePolicy) (ratewarden.Store, error) { return m.st, nil }

// Ready is always nil: the store is in process.
func (m *Memory) Ready(context.Context, config.FailurePolicy) error { return nil }

// Breakers is nil: there is no breaker.
func (m *Memory) Breakers() map[config.FailurePolicy]int { return nil }

// Close releases the store.
func (m *Memory) Close() error { return m.st.Close() }

// Redis is a distributed backend: a rueidis client and the Redis stack on
// it, with one front (deadline, circuit breakers, failure policy) per
// failure policy, all over one script store and one deny cache. On Redis
// Cluster each front keeps a breaker per group of slots, so that a failed
// primary degrades only the keys it holds.
type Redis struct {
	client rueidis.Client
	stack  *stack.Stack
	fronts map[config.FailurePolicy]*stack.Front // all built by NewRedis
}

type redisOptions struct {
	timeout  time.Duration
	replicas int
	probe    time.Duration
	logger   *slog.Logger
}

// Option configures a Redis backend.
type Option func(*redisOptions)

// WithTimeout bounds each Redis call (fallback's deadline); default
// fallback.DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *redisOptions) { o.timeout = d } }

// WithReplicas is the number of service replicas sharing the limits, for
// local_fallback's per-replica share; default 1.
func WithReplicas(n int) Option { return func(o *redisOptions) { o.replicas = n } }

// WithProbeInterval is how long an open breaker waits before probing Redis
// again; default fallback.DefaultProbeInterval.
func WithProbeInterval(d time.Duration) Option { return func(o *redisOptions) { o.probe = d } }

// WithLogger sets the logger of the breakers.
func WithLogger(l *slog.Logger) Option { return func(o *redisOptions) { o.logger = l } }

// NewRedis connects to the Redis at url, in the library's grammar
// (redisstore.ParseURL), for example:
//
//	redis://[user:password@]host:port[/db]           standalone
//	rediss://...                                     TLS
//	redis://h1:7000,h2:7001,h3:7002                  Cluster (several seeds; ?addr= also works)
//	redis-sentinel://s1,s2,s3/mymaster               Sentinel (?master_set= also works)
//
// An unknown parameter or a malformed value is an error naming it.
// It fails when an option is invalid (before connecting) or when Redis
// cannot be reached now. The front of every failure policy is built here,
// so Store never fails later.
func NewRedis(url string, opts ...Option) (*Redis, error) {
	o := redisOptions{timeout: fallback.DefaultTimeout, replicas: 1, probe: fallback.DefaultProbeInterval, logger: slog.Default()}
	for _, f := range opts {
		if f == nil {
			return nil, fmt.Errorf("backend: redis: nil Option: %w", ratewarden.ErrInvalidConfig)
		}
		f(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	copt, err := redisstore.ParseURL(url) // its errors never hold the password
	if err != nil {
		return nil, fmt.Errorf("backend: redis %s: %w", redisstore.RedactURL(url), err)
	}
	client, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, fmt.Errorf("backend: redis %s: %w: %v", redisstore.RedactURL(url), ratewarden.ErrStoreUnavailable, err)
	}
	r, err := newRedis(client, o)
	if err != nil {
		client.Close()
		return nil, err
	}
	return r, nil
}

// newRedis builds the stack on client and a front per failure policy.
func newRedis(client rueidis.Client, o redisOptions) (*Redis, error) {
	st, err := stack.New(client, stack.WithFallback(
		fallback.WithTimeout(o.timeout),
		fallback.WithReplicas(o.replicas),
		fallback.WithProbeInterval(o.probe),
		fallback.WithLogger(o.logger),
	))
	if err != nil {
		return nil, fmt.Errorf("backend: redis stack: %w", err)
	}
	r := &Redis{client: client, stack: st, fronts: make(map[config.FailurePolicy]*stack.Front, len(config.FailurePolicies))}
	for _, fp := range config.FailurePolicies {
		p, err := fallback.ParsePolicy(string(fp))
		if err != nil {
			return nil, fmt.Errorf("backend: redis %s front: %w", fp, err)
		}
		f, err := st.NewFront(fallback.WithPolicy(p), fallback.WithName("redis/"+string(fp)))
		if err != nil {
			return nil, fmt.Errorf("backend: redis %s front: %w", fp, err)
		}
		r.fronts[fp] = f
	}
	return r, nil
}

func (o *redisOptions) validate() error {
	var msg string
	switch {
	case o.timeout <= 0:
		msg = fmt.Sprintf("timeout must be > 0, got %v", o.timeout)
	case o.replicas < 1:
		msg = fmt.Sprintf("replicas must be >= 1, got %d", o.replicas)
	case o.probe <= 0:
		msg = fmt.Sprintf("probe interval must be > 0, got %v", o.probe)
	case o.logger == nil:
		msg = "logger must not be nil"
	default:
		return nil
	}
	return fmt.Errorf("backend: redis: %s: %w", msg, ratewarden.ErrInvalidConfig)
}

// Store returns the front for fp.
func (r *Redis) Store(fp config.FailurePolicy) (ratewarden.Store, error) {
	f, err := r.front(fp)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (r *Redis) front(fp config.FailurePolicy) (*stack.Front, error) {
	if f := r.fronts[fp]; f != nil {
		return f, nil
	}
	return nil, fmt.Errorf("backend: redis: unknown failure policy %q: %w", fp, ratewarden.ErrInvalidConfig)
}

// Ready reports an error while fp's breaker (any of them, on Cluster) is
// open or Redis does not answer PING.
func (r *Redis) Ready(ctx context.Context, fp config.FailurePolicy) error {
	f, err := r.front(fp)
	if err != nil {
		return err
	}
	if f.State() == fallback.StateOpen {
		return errors.New("circuit breaker open: Redis is failing, decisions are degraded")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := r.client.Do(ctx, r.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// Breakers reports the breaker state of every failure policy's front (the
// worst of its breakers, on Cluster).
func (r *Redis) Breakers() map[config.FailurePolicy]int {
	out := make(map[config.FailurePolicy]int, len(r.fronts))
	for fp, f := range r.fronts {
		out[fp] = int(f.State())
	}
	return out
}

// Close closes the Redis client.
func (r *Redis) Close() error {
	r.client.Close()
	return nil
}
