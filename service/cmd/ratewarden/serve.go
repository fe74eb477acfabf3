package main

import (
	"context"
	_ "embed"
	"errors"
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

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := envFlag(fs, getenv, "http-addr", "RATEWARDEN_HTTP_ADDR", ":8080", "HTTP API, metrics and health address")
	grpcAddr := envFlag(fs, getenv, "grpc-addr", "RATEWARDEN_GRPC_ADDR", ":8081", "gRPC (Envoy rate limit service, health) address")
	cfgPaths := envFlag(fs, getenv, "config", "RATEWARDEN_CONFIG", "", "config files or directories, comma-separated (default: built-in, one policy)")
	redisURL := envFlag(fs, getenv, "redis", "RATEWARDEN_REDIS_URL", "", "Redis URL (redis://, rediss://, ?addr= for Cluster, ?master_set= for Sentinel); empty: in-memory, single node")
	token := envFlag(fs, getenv, "api-token", "RATEWARDEN_API_TOKEN", "", "bearer token required by the /v1 HTTP API (prefer the environment variable)")
	failure := envFlag(fs, getenv, "failure-policy", "RATEWARDEN_FAILURE_POLICY", string(config.LocalFallback), "failure policy of limits whose config names none: fail_open, fail_closed, local_fallback")
	replicas := envFlag(fs, getenv, "replicas", "RATEWARDEN_REPLICAS", "1", "number of service replicas sharing the limits (local_fallback's share)")
	redisTimeout := envFlag(fs, getenv, "redis-timeout", "RATEWARDEN_REDIS_TIMEOUT", "50ms", "deadline of each Redis call before the failure policy answers")
	reload := envFlag(fs, getenv, "reload-interval", "RATEWARDEN_RELOAD_INTERVAL", "1s", "how often config files are checked for changes (0: only on SIGHUP)")
	grace := envFlag(fs, getenv, "shutdown-grace", "RATEWARDEN_SHUTDOWN_GRACE", "10s", "time requests in flight get to finish on SIGTERM")
	logLevel := envFlag(fs, getenv, "log-level", "RATEWARDEN_LOG_LEVEL", "info", "debug, info, warn or error")
	logFormat := envFlag(fs, getenv, "log-format", "RATEWARDEN_LOG_FORMAT", "text", "text or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ratewarden serve: "+format+"\n", a...)
		return 1
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fail("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, hopts))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, hopts))
	default:
		return fail("--log-format %q: want text or json", *logFormat)
	}
	fp, err := config.ParseFailurePolicy(*failure)
	if err != nil {
		return fail("--failure-policy: %v", err)
	}
	nrep, err := strconv.Atoi(*replicas)
	if err != nil || nrep < 1 {
		return fail("--replicas %q: want a whole number >= 1", *replicas)
	}
	durs := map[string]*string{"--redis-timeout": redisTimeout, "--reload-interval": reload, "--shutdown-grace": grace}
	parsed := map[string]time.Duration{}
	for name, v := range durs {
		d, err := time.ParseDuration(*v)
		switch {
		case name == "--redis-timeout" && (err != nil || d <= 0):
			// 0 would make every Redis call fail at once.
			return fail("%s %q: want a duration > 0 such as 50ms, 1s", name, *v)
		case err != nil || d < 0:
			return fail("%s %q: want a duration such as 50ms, 1s", name, *v)
		}
		parsed[name] = d
	}

	opts := []server.Option{
		server.WithLogger(log),
		server.WithAPIToken(*token),
		server.WithDefaultFailure(fp),
		server.WithReloadInterval(parsed["--reload-interval"]),
	}
	if *cfgPaths == "" {
		cfg, err := config.Parse("built-in default config", defaultConfig)
		if err != nil {
			return fail("%v", err)
		}
		log.Info("no --config given: using the built-in default config", "policies", len(cfg.Policies))
		opts = append(opts, server.WithConfig(cfg))
	} else {
		opts = append(opts, server.WithConfigPaths(strings.Split(*cfgPaths, ",")...))
	}

	var be server.Backend
	if *redisURL == "" {
		m, err := backend.NewMemory()
		if err != nil {
			return fail("%v", err)
		}
		defer m.Close()
		be = m
		log.Warn("no Redis configured (--redis / RATEWARDEN_REDIS_URL): deciding in memory on this node only; limits are per process, not shared")
	} else {
		r, err := backend.NewRedis(*redisURL,
			backend.WithTimeout(parsed["--redis-timeout"]),
			backend.WithReplicas(nrep),
			backend.WithLogger(log))
		if err != nil {
			return fail("%v", err)
		}
		defer r.Close()
		be = r
		log.Info("deciding on Redis", "url", backend.RedactURL(*redisURL), "default_failure_policy", fp, "replicas", nrep)
	}

	srv, err := server.New(be, opts...)
	if err != nil {
		return fail("%v", err)
	}
	// SIGHUP reloads (and must not kill the process, its default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-hup:
				if *cfgPaths == "" {
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
	if err := srv.Run(ctx, *httpAddr, *grpcAddr, parsed["--shutdown-grace"]); err != nil {
		return fail("%v", err)
	}
	log.Info("stopped")
	return 0
}
