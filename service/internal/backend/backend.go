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
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
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
func (m *Memory) Store(fallback.Policy) (ratewarden.Store, error) { return m.st, nil }

// Ready is always nil: the store is in process.
func (m *Memory) Ready(context.Context, fallback.Policy) error { return nil }

// Breakers is nil: there is no breaker.
func (m *Memory) Breakers() map[fallback.Policy]fallback.State { return nil }

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
	fronts map[fallback.Policy]*stack.Front // all built by NewRedis
}

// Option configures a Redis backend. Options only record their value;
// NewRedis validates what they collected and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting. When an option is
// given twice, the last one counts.
type Option func(*config)

// config is what the options of NewRedis collect.
type config struct {
	tls      tlsfiles.Client
	timeout  time.Duration
	replicas int
	probe    time.Duration
	logger   *slog.Logger
	leases   int64
}

// WithTimeout bounds each Redis call (fallback's deadline); default
// fallback.DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithReplicas is the number of service replicas sharing the limits, for
// local_fallback's per-replica share; default 1.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithProbeInterval is how long an open breaker waits before probing Redis
// again; default fallback.DefaultProbeInterval.
func WithProbeInterval(d time.Duration) Option { return func(c *config) { c.probe = d } }

// WithTLS sets a rediss:// connection's CA and client certificate, beyond
// what the URL grammar says (redisstore.ParseURL has no parameters for
// them); for Sentinel, the sentinels' connections too.
func WithTLS(f tlsfiles.Client) Option { return func(c *config) { c.tls = f } }

// applyTLS puts f's files into the TLS configuration ParseURL made (nil
// unless rediss://), for Redis and, for Sentinel, the sentinels.
func applyTLS(copt *rueidis.ClientOption, f tlsfiles.Client) error {
	if !f.Given() {
		return nil
	}
	if copt.TLSConfig == nil {
		return fmt.Errorf("backend: redis: a CA or client certificate needs TLS (rediss:// or rediss-sentinel://): %w", ratewarden.ErrInvalidConfig)
	}
	if err := f.Apply(copt.TLSConfig); err != nil {
		return fmt.Errorf("backend: redis TLS: %w", err)
	}
	if copt.Sentinel.TLSConfig != nil {
		copt.Sentinel.TLSConfig = copt.TLSConfig.Clone()
	}
	return nil
}

// WithLeaseSize turns on lease mode (stack.WithLeases) with leases of n
// units: a replica takes a hot fixed_window or token_bucket limit's
// capacity from Redis n units at a time and admits from it locally, never
// more than the limit, possibly fewer (docs/leases.md). 0, the default,
// is off.
func WithLeaseSize(n int64) Option { return func(c *config) { c.leases = n } }

// WithLogger sets the logger of the breakers.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

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
	c := config{timeout: fallback.DefaultTimeout, replicas: 1, probe: fallback.DefaultProbeInterval, logger: slog.Default()}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("backend: redis: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	copt, err := redisstore.ParseURL(url) // its errors never hold the password
	if err != nil {
		return nil, fmt.Errorf("backend: redis %s: %w", redisstore.RedactURL(url), err)
	}
	if err := applyTLS(&copt, c.tls); err != nil {
		return nil, err
	}
	client, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, fmt.Errorf("backend: redis %s: %w: %v", redisstore.RedactURL(url), ratewarden.ErrStoreUnavailable, err)
	}
	r, err := newRedis(client, c)
	if err != nil {
		client.Close()
		return nil, err
	}
	return r, nil
}

// newRedis builds the stack on client and a front per failure policy.
func newRedis(client rueidis.Client, c config) (*Redis, error) {
	opts := []stack.Option{stack.WithFallback(
		fallback.WithTimeout(c.timeout),
		fallback.WithReplicas(c.replicas),
		fallback.WithProbeInterval(c.probe),
		fallback.WithLogger(c.logger),
	)}
	if c.leases > 0 {
		opts = append(opts, stack.WithLeases(lease.WithSize(c.leases)))
	}
	st, err := stack.New(client, opts...)
	if err != nil {
		return nil, fmt.Errorf("backend: redis stack: %w", err)
	}
	r := &Redis{client: client, stack: st, fronts: map[fallback.Policy]*stack.Front{}}
	for fp := fallback.FailOpen; fp <= fallback.LocalFallback; fp++ { // every policy
		f, err := st.NewFront(fallback.WithPolicy(fp), fallback.WithName("redis/"+fp.String()))
		if err != nil {
			return nil, fmt.Errorf("backend: redis %s front: %w", fp, err)
		}
		r.fronts[fp] = f
	}
	return r, nil
}

// validate names the first setting out of its range.
func (c *config) validate() error {
	var msg string
	switch {
	case c.timeout <= 0:
		msg = fmt.Sprintf("timeout must be > 0, got %v", c.timeout)
	case c.replicas < 1:
		msg = fmt.Sprintf("replicas must be >= 1, got %d", c.replicas)
	case c.probe <= 0:
		msg = fmt.Sprintf("probe interval must be > 0, got %v", c.probe)
	case c.logger == nil:
		msg = "logger must not be nil"
	case c.leases < 0:
		msg = fmt.Sprintf("lease size must be >= 0, got %d", c.leases)
	default:
		return nil
	}
	return fmt.Errorf("backend: redis: %s: %w", msg, ratewarden.ErrInvalidConfig)
}

// Store returns the front for fp.
func (r *Redis) Store(fp fallback.Policy) (ratewarden.Store, error) {
	f, err := r.front(fp)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (r *Redis) front(fp fallback.Policy) (*stack.Front, error) {
	if f := r.fronts[fp]; f != nil {
		return f, nil
	}
	return nil, fmt.Errorf("backend: redis: unknown failure policy %q: %w", fp, ratewarden.ErrInvalidConfig)
}

// Ready reports an error while fp's breaker (any of them, on Cluster) is
// open or Redis does not answer PING.
func (r *Redis) Ready(ctx context.Context, fp fallback.Policy) error {
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
func (r *Redis) Breakers() map[fallback.Policy]fallback.State {
	out := make(map[fallback.Policy]fallback.State, len(r.fronts))
	for fp, f := range r.fronts {
		out[fp] = f.State()
	}
	return out
}

// Close closes the Redis client.
func (r *Redis) Close() error {
	// Unused leased units go back to Redis before the client closes.
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	err := r.stack.Close(ctx)
	cancel()
	r.client.Close()
	if err != nil {
		return fmt.Errorf("backend: redis: give leases back: %w", err)
	}
	return nil
}

// closeTimeout bounds how long Close gives leased units back.
const closeTimeout = 2 * time.Second
