package demo

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/redisproc"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/demo/apistore"
	"github.com/ratewarden/ratewarden/service/demo/fleet"
	"github.com/ratewarden/ratewarden/service/demo/naive"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

// keyPrefix starts every Redis key the demo writes.
const keyPrefix = "ratewarden-demo:"

// shared is the shared state of a demo: a Redis URL, or the HTTP API of
// an in-process ratewarden server.
type shared struct {
	kind     string
	redisURL string // KindRedisServer, KindRedis
	apiURL   string // KindServer: http://127.0.0.1:PORT
	desc     string
}

func (s *shared) label() string {
	if s.kind == KindServer {
		return "ratewarden server"
	}
	return "Redis"
}

// startShared picks and starts the shared state: Redis at cfg.RedisURL, a
// redis-server from PATH, or an in-process ratewarden server.
func startShared(ctx context.Context, cfg *Config, rep *Report, cl *cleanup) (*shared, error) {
	var (
		sh  *shared
		err error
	)
	bin, lookErr := "", error(nil)
	if cfg.RedisURL == "" {
		bin, lookErr = cfg.LookPath("redis-server")
	}
	switch {
	case cfg.RedisURL != "":
		sh, err = givenRedis(cfg.RedisURL)
	case lookErr == nil:
		sh, err = startRedis(ctx, bin, rep, cl)
	case cfg.Race:
		return nil, ErrNeedsRedis
	default:
		sh, err = startServer(rep, cl, cfg.Limit)
	}
	if err != nil {
		return nil, err
	}
	rep.Shared, rep.SharedKind = sh.desc, sh.kind
	return sh, nil
}

// givenRedis checks that the user's Redis answers; each replica dials its
// own connection later.
func givenRedis(url string) (*shared, error) {
	c, err := redisstore.ClientFromURL(url)
	if err != nil {
		return nil, fmt.Errorf("demo: --redis: %w", err)
	}
	c.Close()
	return &shared{kind: KindRedis, redisURL: url, desc: "Redis at " + redisstore.RedactURL(url)}, nil
}

// startRedis starts the redis-server at bin on a free loopback port
// (internal/redisproc: persistence off, no files, dies with the demo) and
// registers its end.
func startRedis(ctx context.Context, bin string, rep *Report, cl *cleanup) (*shared, error) {
	srv, err := redisproc.Start(ctx, redisproc.WithBinary(bin))
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	cl.add(srv.Stop)
	rep.Addrs = append(rep.Addrs, srv.Addr)
	rep.RedisPID = srv.PID()
	return &shared{kind: KindRedisServer, redisURL: "redis://" + srv.Addr, desc: "redis-server on " + srv.Addr + " (started by the demo)"}, nil
}

// startServer starts a ratewarden server in process, on the in-memory
// store, which the replicas call over its HTTP API. The replicas send the
// demo's limit inline, so the server allows inline limits up to that one.
func startServer(rep *Report, cl *cleanup, lim ratewarden.Limit) (*shared, error) {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("demo: ratewarden server: %w", err)
	}
	cl.add(func() { _ = b.Close() })
	// The demo's clients send inline limits; the policy is there because
	// a configuration without any policy or domain is refused.
	conf, err := config.Parse("demo.yaml", []byte("policies: {unused: 1/1s}\n"))
	if err != nil {
		return nil, fmt.Errorf("demo: server config: %w", err)
	}
	inline := config.InlineLimits{Enabled: true, MaxPeriod: lim.Period, MaxRate: max(lim.Rate, lim.Burst), MaxSlidingLog: lim.Rate, MaxCost: lim.Capacity()}
	srv, err := server.New(b, server.WithConfig(conf), server.WithInlineLimits(inline), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, fmt.Errorf("demo: ratewarden server: %w", err)
	}
	if err := srv.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("demo: ratewarden server: %w", err)
	}
	cl.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), fleet.ShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	rep.Addrs = append(rep.Addrs, srv.HTTPAddr(), srv.GRPCAddr())
	return &shared{kind: KindServer, apiURL: "http://" + srv.HTTPAddr(),
		desc: "in-process ratewarden server on " + srv.HTTPAddr() + ", called over its HTTP API (no redis-server on PATH)"}, nil
}

// stores gives every replica its own connection to the shared limiter:
// a rueidis client and redisstore (the atomic script), or a client of the
// ratewarden server's HTTP API.
func (s *shared) stores(n int) ([]replicaStore, error) {
	if s.kind == KindServer {
		out := make([]replicaStore, 0, n)
		for range n {
			st := apistore.New(s.apiURL)
			out = append(out, replicaStore{st: st, close: st.Close})
		}
		return out, nil
	}
	return s.redisStores(n, func(c rueidis.Client) (ratewarden.Store, error) {
		return redisstore.New(c, redisstore.WithPrefix(keyPrefix))
	})
}

// naiveStores gives every replica its own connection to Redis and the
// naive, non-atomic counter.
func (s *shared) naiveStores(n int) ([]replicaStore, error) {
	if s.redisURL == "" {
		return nil, ErrNeedsRedis
	}
	return s.redisStores(n, func(c rueidis.Client) (ratewarden.Store, error) { return naive.New(c, keyPrefix) })
}

// redisStores makes n stores, each with its own client of s.redisURL.
func (s *shared) redisStores(n int, store func(rueidis.Client) (ratewarden.Store, error)) ([]replicaStore, error) {
	out := make([]replicaStore, 0, n)
	for range n {
		c, err := redisstore.ClientFromURL(s.redisURL)
		if err != nil {
			closeStores(out)
			return nil, fmt.Errorf("demo: %w", err)
		}
		st, err := store(c)
		if err != nil {
			c.Close()
			closeStores(out)
			return nil, fmt.Errorf("demo: %w", err)
		}
		out = append(out, replicaStore{st: st, close: c.Close})
	}
	return out, nil
}

// naiveCount reads the naive counter of the client with API key clientKey,
// under the key the replicas' middleware gave it.
func (s *shared) naiveCount(ctx context.Context, clientKey string, l ratewarden.Limit) (int, error) {
	key, err := fleet.LimiterKey(clientKey)
	if err != nil {
		return 0, fmt.Errorf("demo: %w", err)
	}
	c, err := redisstore.ClientFromURL(s.redisURL)
	if err != nil {
		return 0, fmt.Errorf("demo: %w", err)
	}
	defer c.Close()
	st, err := naive.New(c, keyPrefix)
	if err != nil {
		return 0, fmt.Errorf("demo: %w", err)
	}
	n, err := st.Count(ctx, key, l)
	if err != nil {
		return 0, fmt.Errorf("demo: reading the naive counter: %w", err)
	}
	return int(n), nil
}
