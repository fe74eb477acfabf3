package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
)

// defaultConfig is used when no --config is given: one policy for the HTTP
// API and no Envoy domain (every gRPC request is OK until one is configured).
//
//go:embed default.yaml
var defaultConfig []byte

// envFlag registers a string flag whose default comes from an environment
// variable when it is set.
func envFlag(fs *flag.FlagSet, getenv func(string) string, name, env, def, help string) *string {
	if v := getenv(env); v != "" {
		def = v
	}
	return fs.String(name, def, help+" ($"+env+")")
}

const serveHead = `usage: ratewarden serve [flags]

Runs the HTTP API (/v1/check, /v1/peek, /v1/reset, metrics, health) and
Envoy's gRPC rate limit service until SIGINT or SIGTERM; SIGHUP reloads
the config files. Every flag has an environment variable, named in its
help; a flag given on the command line wins.
`

const serveExits = `  0  stopped by SIGINT or SIGTERM after a clean shutdown
  1  error: bad flag value or config, Redis unreachable, address in use, unclean shutdown
  2  usage error
`

// serveFlags are the values of serve's flags, as given.
type serveFlags struct {
	httpAddr, grpcAddr, cfgPaths, redisURL, token, failure, replicas *string
	redisTimeout, reload, grace, logLevel, logFormat                 *string
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("serve", serveHead, serveExits)
	f := serveFlags{
		httpAddr:     envFlag(fs, getenv, "http-addr", "RATEWARDEN_HTTP_ADDR", ":8080", "HTTP API, metrics and health address"),
		grpcAddr:     envFlag(fs, getenv, "grpc-addr", "RATEWARDEN_GRPC_ADDR", ":8081", "gRPC (Envoy rate limit service, health) address"),
		cfgPaths:     envFlag(fs, getenv, "config", "RATEWARDEN_CONFIG", "", "config files or directories, comma-separated (default: built-in, one policy)"),
		redisURL:     envFlag(fs, getenv, "redis", "RATEWARDEN_REDIS_URL", "", "Redis URL (redis://host:6379, redis://h1:7000,h2:7001 for Cluster, redis-sentinel://s1,s2/master; see docs/operations.md); empty: in-memory, single node"),
		token:        envFlag(fs, getenv, "api-token", "RATEWARDEN_API_TOKEN", "", "bearer token required by the /v1 HTTP API (prefer the environment variable)"),
		failure:      envFlag(fs, getenv, "failure-policy", "RATEWARDEN_FAILURE_POLICY", string(config.LocalFallback), "failure policy of limits whose config names none: fail_open, fail_closed, local_fallback"),
		replicas:     envFlag(fs, getenv, "replicas", "RATEWARDEN_REPLICAS", "1", "number of service replicas sharing the limits (local_fallback's share)"),
		redisTimeout: envFlag(fs, getenv, "redis-timeout", "RATEWARDEN_REDIS_TIMEOUT", "50ms", "deadline of each Redis call before the failure policy answers"),
		reload:       envFlag(fs, getenv, "reload-interval", "RATEWARDEN_RELOAD_INTERVAL", "1s", "how often config files are checked for changes (0: only on SIGHUP)"),
		grace:        envFlag(fs, getenv, "shutdown-grace", "RATEWARDEN_SHUTDOWN_GRACE", "10s", "time requests in flight get to finish on SIGTERM"),
		logLevel:     envFlag(fs, getenv, "log-level", "RATEWARDEN_LOG_LEVEL", "info", "debug, info, warn or error"),
		logFormat:    envFlag(fs, getenv, "log-format", "RATEWARDEN_LOG_FORMAT", "text", "text or json"),
	}
	pos, code, done := parseCommand(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(stderr, "serve", "unexpected arguments %q", pos)
	}
	if err := runService(ctx, f, stderr); err != nil {
		fmt.Fprintf(stderr, "ratewarden serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// serveSettings are serve's flags, checked and parsed.
type serveSettings struct {
	log                  *slog.Logger
	failure              config.FailurePolicy
	replicas             int
	redisTimeout, reload time.Duration
	grace                time.Duration
}

func (f serveFlags) parse(stderr io.Writer) (serveSettings, error) {
	var st serveSettings
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return st, fmt.Errorf("--log-level %q: want debug, info, warn or error", *f.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch *f.logFormat {
	case "text":
		st.log = slog.New(slog.NewTextHandler(stderr, hopts))
	case "json":
		st.log = slog.New(slog.NewJSONHandler(stderr, hopts))
	default:
		return st, fmt.Errorf("--log-format %q: want text or json", *f.logFormat)
	}
	var err error
	if st.failure, err = config.ParseFailurePolicy(*f.failure); err != nil {
		return st, fmt.Errorf("--failure-policy: %w", err)
	}
	if st.replicas, err = strconv.Atoi(*f.replicas); err != nil || st.replicas < 1 {
		return st, fmt.Errorf("--replicas %q: want a whole number >= 1", *f.replicas)
	}
	for _, d := range []struct {
		name string
		v    *string
		to   *time.Duration
	}{{"--redis-timeout", f.redisTimeout, &st.redisTimeout}, {"--reload-interval", f.reload, &st.reload}, {"--shutdown-grace", f.grace, &st.grace}} {
		v, err := time.ParseDuration(*d.v)
		switch {
		case d.name == "--redis-timeout" && (err != nil || v <= 0):
			// 0 would make every Redis call fail at once.
			return st, fmt.Errorf("%s %q: want a duration > 0 such as 50ms, 1s", d.name, *d.v)
		case err != nil || v < 0:
			return st, fmt.Errorf("%s %q: want a duration such as 50ms, 1s", d.name, *d.v)
		}
		*d.to = v
	}
	return st, nil
}

// runService starts the service and serves until ctx is done. The words
// on what it decides with (memory or Redis) come once it listens, never
// before a startup error.
func runService(ctx context.Context, f serveFlags, stderr io.Writer) error {
	st, err := f.parse(stderr)
	if err != nil {
		return err
	}
	log := st.log
	opts := []server.Option{
		server.WithLogger(log),
		server.WithAPIToken(*f.token),
		server.WithDefaultFailure(st.failure),
		server.WithReloadInterval(st.reload),
	}
	var builtin *config.Config // without --config
	if *f.cfgPaths == "" {
		if builtin, err = config.Parse("built-in default config", defaultConfig); err != nil {
			return err
		}
		opts = append(opts, server.WithConfig(builtin))
	} else {
		opts = append(opts, server.WithConfigPaths(strings.Split(*f.cfgPaths, ",")...))
	}
	be, closeBackend, err := newBackend(*f.redisURL, st)
	if err != nil {
		return err
	}
	defer closeBackend()
	srv, err := server.New(be, opts...)
	if err != nil {
		return err
	}
	stopHUP := reloadOnHUP(srv, log, builtin != nil)
	defer stopHUP()
	if err := srv.Start(*f.httpAddr, *f.grpcAddr); err != nil {
		return err
	}
	if builtin != nil {
		log.Info("no --config given: using the built-in default config", "policies", len(builtin.Policies))
	}
	if *f.redisURL == "" {
		log.Warn("no Redis configured (--redis / RATEWARDEN_REDIS_URL): deciding in memory on this node only; limits are per process, not shared")
	} else {
		log.Info("deciding on Redis", "url", backend.RedactURL(*f.redisURL), "default_failure_policy", st.failure, "replicas", st.replicas)
	}
	<-ctx.Done()
	log.Info("shutting down", "grace", st.grace)
	sctx, cancel := context.WithTimeout(context.Background(), st.grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// newBackend is the in-memory backend without a Redis URL, else Redis.
func newBackend(redisURL string, st serveSettings) (server.Backend, func(), error) {
	if redisURL == "" {
		m, err := backend.NewMemory()
		if err != nil {
			return nil, nil, err
		}
		return m, func() { _ = m.Close() }, nil
	}
	r, err := backend.NewRedis(redisURL,
		backend.WithTimeout(st.redisTimeout),
		backend.WithReplicas(st.replicas),
		backend.WithLogger(st.log))
	if err != nil {
		return nil, nil, err
	}
	return r, func() { _ = r.Close() }, nil
}

// reloadOnHUP reloads srv's config on SIGHUP (which must not kill the
// process, its default action) until the returned function is called.
func reloadOnHUP(srv *server.Server, log *slog.Logger, builtin bool) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if builtin {
					log.Warn("SIGHUP: nothing to reload; the built-in config is in use (give --config)")
					continue
				}
				log.Info("SIGHUP: reloading the config")
				_ = srv.Reload() // logged inside
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}
