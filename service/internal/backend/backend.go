// Package backend builds the stores the service decides on: the in-memory
// store for a single node, or the library's Redis stack (package stack;
// standalone, Sentinel or Cluster URL) with one failure-policy front per
// failure policy over one script store and one deny cache.
package backend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/lease"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/redisstore"
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

type redisOptions struct {
	tls      RedisTLS
	timeout  time.Duration
	replicas int
	probe    time.Duration
	logger   *slog.Logger
	leases   int64
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

// RedisTLS are the files of a rediss:// connection's TLS, beyond what
// the URL grammar says (redisstore.ParseURL has no parameters for them).
type RedisTLS struct {
	// CAFile (PEM) replaces the system roots for the server's
	// certificate.
	CAFile string
	// CertFile and KeyFile (PEM) are a client certificate for Redis'
	// tls-auth-clients.
	CertFile, KeyFile string
	// SkipHostname verifies the server's chain but not its name
	// (envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostname bool
}

func (t RedisTLS) given() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.SkipHostname
}

// WithTLS sets a rediss:// connection's CA and client certificate.
func WithTLS(t RedisTLS) Option { return func(o *redisOptions) { o.tls = t } }

// applyTLS puts t's files into the TLS configuration ParseURL made
// (nil unless rediss://), for Redis and, for Sentinel, the sentinels.
func applyTLS(copt *rueidis.ClientOption, t RedisTLS) error {
	if !t.given() {
		return nil
	}
	if copt.TLSConfig == nil {
		return fmt.Errorf("backend: redis: a CA or client certificate needs TLS (rediss:// or rediss-sentinel://): %w", ratewarden.ErrInvalidConfig)
	}
	tc := copt.TLSConfig
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return fmt.Errorf("backend: redis CA: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("backend: redis CA %s: no PEM certificate: %w", t.CAFile, ratewarden.ErrInvalidConfig)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return fmt.Errorf("backend: redis client certificate: %v: %w", err, ratewarden.ErrInvalidConfig)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	if t.SkipHostname {
		roots := tc.RootCAs
		tc.InsecureSkipVerify = true
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, len(raw))
			for i, b := range raw {
				c, err := x509.ParseCertificate(b)
				if err != nil {
					return err
				}
				certs[i] = c
			}
			if len(certs) == 0 {
				return errors.New("backend: redis: no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	if copt.Sentinel.TLSConfig != nil {
		copt.Sentinel.TLSConfig = tc.Clone()
	}
	return nil
}

// WithLeaseSize turns on lease mode (stack.WithLeases) with leases of n
// units: a replica takes a hot fixed_window or token_bucket limit's
// capacity from Redis n units at a time and admits from it locally, never
// more than the limit, possibly fewer (docs/leases.md). 0, the default,
// is off.
func WithLeaseSize(n int64) Option { return func(o *redisOptions) { o.leases = n } }

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
	if err := applyTLS(&copt, o.tls); err != nil {
		return nil, err
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
	opts := []stack.Option{stack.WithFallback(
		fallback.WithTimeout(o.timeout),
		fallback.WithReplicas(o.replicas),
		fallback.WithProbeInterval(o.probe),
		fallback.WithLogger(o.logger),
	)}
	if o.leases > 0 {
		opts = append(opts, stack.WithLeases(lease.WithSize(o.leases)))
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
	case o.leases < 0:
		msg = fmt.Sprintf("lease size must be >= 0, got %d", o.leases)
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
