// Package backend builds the stores the service decides on: the in-memory
// store for a single node, or Redis (standalone, Sentinel or Cluster URL)
// behind one fallback decorator per failure policy.
package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/config"
)

// Memory is a single-node backend: one in-process store for every limit.
// It has no failure modes, so every failure policy gets the same store.
type Memory struct{ st *memstore.Store }

// NewMemory returns a Memory backend.
func NewMemory() (*Memory, error) {
	st, err := memstore.New()
	if err != nil {
		return nil, err
	}
	return &Memory{st: st}, nil
}

// Store returns the in-memory store.
func (m *Memory) Store(config.FailurePolicy) (ratewarden.Store, error) { return m.st, nil }

// Ready is always nil: the store is in process.
func (m *Memory) Ready(context.Context, config.FailurePolicy) error { return nil }

// Breakers is nil: there is no breaker.
func (m *Memory) Breakers() map[config.FailurePolicy]int { return nil }

// Close releases the store.
func (m *Memory) Close() error { return m.st.Close() }

// Redis is a distributed backend: a rueidis client, a redisstore, and per
// failure policy a fallback store (deadline, circuit breaker, policy) built
// on first use.
type Redis struct {
	client  rueidis.Client
	primary ratewarden.Store
	opts    redisOptions

	mu     sync.Mutex
	stores map[config.FailurePolicy]breakerStore
}

// breakerStore is a fallback store: one breaker (fallback.Store) or, on
// Redis Cluster, one per group of slots (fallback.Partitioned), so that a
// failed primary degrades only the keys it holds.
type breakerStore interface {
	ratewarden.Store
	State() fallback.State
}

// slotGroups is the number of breakers on Redis Cluster: groups of 1024
// slots, fine enough that most groups lie on one primary.
const slotGroups = 16

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
// cannot be reached now. The store of every failure policy is built here,
// so Store never fails later.
func NewRedis(url string, opts ...Option) (*Redis, error) {
	o := redisOptions{timeout: fallback.DefaultTimeout, replicas: 1, probe: fallback.DefaultProbeInterval, logger: slog.Default()}
	for _, f := range opts {
		if f == nil {
			return nil, fmt.Errorf("%w: redis backend: nil Option", ratewarden.ErrInvalidConfig)
		}
		f(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	copt, err := redisstore.ParseURL(url) // its errors never hold the password
	if err != nil {
		return nil, fmt.Errorf("redis backend: %s: %w", redisstore.RedactURL(url), err)
	}
	client, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, fmt.Errorf("%w: redis %s: %v", ratewarden.ErrStoreUnavailable, redisstore.RedactURL(url), err)
	}
	primary, err := newRedisStore(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	r := &Redis{client: client, primary: primary, opts: o, stores: map[config.FailurePolicy]breakerStore{}}
	for _, fp := range config.FailurePolicies {
		if _, err := r.store(fp); err != nil {
			client.Close()
			return nil, fmt.Errorf("redis backend: %s store: %w", fp, err)
		}
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
	return fmt.Errorf("%w: redis backend: %s", ratewarden.ErrInvalidConfig, msg)
}

// Store returns the fallback store for fp, building it on first use.
func (r *Redis) Store(fp config.FailurePolicy) (ratewarden.Store, error) {
	return r.store(fp)
}

func (r *Redis) store(fp config.FailurePolicy) (breakerStore, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.stores[fp]; st != nil {
		return st, nil
	}
	p, err := fallback.ParsePolicy(string(fp))
	if err != nil {
		return nil, err
	}
	opts := []fallback.Option{
		fallback.WithPolicy(p),
		fallback.WithTimeout(r.opts.timeout),
		fallback.WithReplicas(r.opts.replicas),
		fallback.WithProbeInterval(r.opts.probe),
		fallback.WithName("redis/" + string(fp)),
		fallback.WithLogger(r.opts.logger),
	}
	var st breakerStore
	if r.client.Mode() == rueidis.ClientModeCluster {
		st, err = fallback.NewPartitioned(r.primary, slotGroups,
			func(key string) int { return redisstore.Slot(key) / (16384 / slotGroups) }, opts...)
	} else {
		st, err = fallback.New(r.primary, opts...)
	}
	if err != nil {
		return nil, err
	}
	r.stores[fp] = st
	return st, nil
}

// Ready reports an error while fp's breaker is open or Redis does not
// answer PING.
func (r *Redis) Ready(ctx context.Context, fp config.FailurePolicy) error {
	st, err := r.store(fp)
	if err != nil {
		return err
	}
	if st.State() == fallback.StateOpen {
		return errors.New("circuit breaker open: Redis is failing, decisions are degraded")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := r.client.Do(ctx, r.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// Breakers reports the breaker state of every fallback store built.
func (r *Redis) Breakers() map[config.FailurePolicy]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[config.FailurePolicy]int, len(r.stores))
	for fp, st := range r.stores {
		out[fp] = int(st.State())
	}
	return out
}

// Close closes the Redis client.
func (r *Redis) Close() error {
	r.client.Close()
	return nil
}
