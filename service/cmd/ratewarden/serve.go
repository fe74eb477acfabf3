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

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/internal/gctune"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/api"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/rls"
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

// boolText is the text of a boolean flag: given alone (--inline-limits)
// it is "true"; its value is checked with the other settings.
type boolText struct{ s *string }

func (b boolText) String() string {
	if b.s == nil {
		return ""
	}
	return *b.s
}
func (b boolText) Set(v string) error { *b.s = v; return nil }
func (b boolText) IsBoolFlag() bool   { return true }

// envBoolFlag registers a boolean flag, default false or its environment
// variable's value.
func envBoolFlag(fs *flag.FlagSet, getenv func(string) string, name, env, help string) *string {
	return peerBoolFlag(fs, getenv, name, env, "", help)
}

// peerBoolFlag is envBoolFlag with a second variable, envoyproxy/ratelimit's
// name for the setting, read when the first is not set, so a migrated
// deployment keeps its environment.
func peerBoolFlag(fs *flag.FlagSet, getenv func(string) string, name, env, peerEnv, help string) *string {
	v := "false"
	if e := getenv(env); e != "" {
		v = e
	} else if e := getenv(peerEnv); peerEnv != "" && e != "" {
		v = e
	}
	envs := " ($" + env + ")"
	if peerEnv != "" {
		envs = " ($" + env + ", else $" + peerEnv + ")"
	}
	fs.Var(boolText{&v}, name, help+envs)
	return &v
}

const serveHead = `usage: ratewarden serve [flags]

Runs the HTTP API (/v1/check, /v1/peek, /v1/reset, metrics, health) and
Envoy's gRPC rate limit service until SIGINT or SIGTERM; SIGHUP reloads
the config files. Every flag has an environment variable, named in its
help; a flag given on the command line wins. envoyproxy/ratelimit's
variables (PORT, GRPC_PORT, REDIS_URL, CONFIG_TYPE, ...) stand in for
ratewarden's when those are not set (docs/service.md, "Running as
envoyproxy/ratelimit").
`

const serveExits = `  0  stopped by SIGINT or SIGTERM after a clean shutdown
  1  error: bad flag value or config, Redis unreachable, address in use, unclean shutdown
  2  usage error
`

// serveFlags are the values of serve's flags, as given (each defaulting
// to its environment variable).
type serveFlags struct {
	httpAddr, grpcAddr, cfgPaths, redisURL, token, failure, replicas *string
	redisTimeout, reload, grace, logLevel, logFormat                 *string
	leaseSize, gcHeadroom                                            *string
	inline, maxKeyBytes, adminAddr                                   *string
	rlsHeaders, mergeDomains, dynMeta, shadowMode, quotaMode         *string
	headerNames                                                      [3]string
	configType, xdsServer, xdsNode, nearRatio                        *string
	tlsCert, tlsKey, tlsClientCA, tlsServers                         *string
	redisCA, redisCert, redisKey                                     *string
	tracingOn, tracingEndpoint, tracingProtocol, tracingSampling     *string
	tracingName, secret                                              *string
	getenv                                                           func(string) string
}

// newServeFlags defines serve's flags on a new flag set.
func newServeFlags(getenv func(string) string) (*flag.FlagSet, serveFlags) {
	fs := newFlagSet("serve", serveHead, serveExits)
	return fs, serveFlags{
		httpAddr:        envFlag(fs, getenv, "http-addr", "RATEWARDEN_HTTP_ADDR", ":8080", "HTTP API, metrics and health address"),
		grpcAddr:        envFlag(fs, getenv, "grpc-addr", "RATEWARDEN_GRPC_ADDR", ":8081", "gRPC (Envoy rate limit service, health) address"),
		cfgPaths:        envFlag(fs, getenv, "config", "RATEWARDEN_CONFIG", "", "config files or directories, comma-separated (default: built-in, one policy)"),
		redisURL:        envFlag(fs, getenv, "redis", "RATEWARDEN_REDIS_URL", "", "Redis URL (redis://host:6379, redis://h1:7000,h2:7001 for Cluster, redis-sentinel://s1,s2/master; see docs/operations.md); empty: in-memory, single node"),
		token:           envFlag(fs, getenv, "api-token", "RATEWARDEN_API_TOKEN", "", "bearer token required by the /v1 HTTP API (prefer the environment variable)"),
		failure:         envFlag(fs, getenv, "failure-policy", "RATEWARDEN_FAILURE_POLICY", fallback.LocalFallback.String(), "failure policy of limits whose config names none: fail_open, fail_closed, local_fallback"),
		replicas:        envFlag(fs, getenv, "replicas", "RATEWARDEN_REPLICAS", "1", "number of service replicas sharing the limits (local_fallback's share)"),
		redisTimeout:    envFlag(fs, getenv, "redis-timeout", "RATEWARDEN_REDIS_TIMEOUT", "50ms", "deadline of each Redis call before the failure policy answers"),
		leaseSize:       envFlag(fs, getenv, "lease-size", "RATEWARDEN_LEASE_SIZE", "0", "with --redis: units a replica takes from Redis at once for fixed_window and token_bucket limits, admitted locally (lease mode, docs/leases.md: never more than a limit, maybe fewer; for hot keys); 0: off"),
		gcHeadroom:      envFlag(fs, getenv, "gc-headroom", "RATEWARDEN_GC_HEADROOM", "64MiB", "heap growth allowed between garbage collections while the live heap is smaller (bytes, or with KiB, MiB, GiB): fewer collections for less CPU per request, at up to this much more RSS; 0, or GOGC in the environment, leaves the collector at Go's default"),
		reload:          envFlag(fs, getenv, "reload-interval", "RATEWARDEN_RELOAD_INTERVAL", "1s", "how often config files are checked for changes (0: only on SIGHUP)"),
		grace:           envFlag(fs, getenv, "shutdown-grace", "RATEWARDEN_SHUTDOWN_GRACE", "10s", "time requests in flight get to finish on SIGTERM"),
		logLevel:        envFlag(fs, getenv, "log-level", "RATEWARDEN_LOG_LEVEL", "info", "debug, info, warn or error"),
		logFormat:       envFlag(fs, getenv, "log-format", "RATEWARDEN_LOG_FORMAT", "text", "text or json"),
		inline:          envBoolFlag(fs, getenv, "inline-limits", "RATEWARDEN_INLINE_LIMITS", `take inline limits ("limit" in /v1 requests), bounded by the config's inline_limits maxima; a config's inline_limits.enabled turns them on too`),
		maxKeyBytes:     envFlag(fs, getenv, "max-key-bytes", "RATEWARDEN_MAX_KEY_BYTES", strconv.Itoa(server.DefaultMaxKeyBytes), "cap on a caller key's bytes (HTTP key, Envoy domain and descriptor entries)"),
		adminAddr:       envFlag(fs, getenv, "admin-addr", "RATEWARDEN_ADMIN_ADDR", "", "serve /metrics and the detailed /readyz on this address instead of the HTTP address (empty: on the HTTP address)"),
		rlsHeaders:      envFlag(fs, getenv, "rls-headers", "RATEWARDEN_RLS_HEADERS", defaultRLSHeaders(getenv), "gRPC answers' headers: ratewarden (RateLimit draft and X-RateLimit-*), envoy (envoyproxy/ratelimit's RateLimit-Limit/-Remaining/-Reset, named by $LIMIT_LIMIT_HEADER, $LIMIT_REMAINING_HEADER, $LIMIT_RESET_HEADER) or none; default envoy when $LIMIT_RESPONSE_HEADERS_ENABLED is true, none when it is false"),
		mergeDomains:    peerBoolFlag(fs, getenv, "merge-domains", "RATEWARDEN_MERGE_DOMAINS", "MERGE_DOMAIN_CONFIG", "merge config documents of the same Envoy domain instead of refusing the second"),
		dynMeta:         peerBoolFlag(fs, getenv, "response-dynamic-metadata", "RATEWARDEN_RESPONSE_DYNAMIC_METADATA", "RESPONSE_DYNAMIC_METADATA", "add the request's domain, descriptors and quota_mode violations to gRPC answers' dynamic_metadata"),
		shadowMode:      peerBoolFlag(fs, getenv, "shadow-mode", "RATEWARDEN_SHADOW_MODE", "SHADOW_MODE", "gRPC answers are always OK overall; statuses still say OVER_LIMIT"),
		quotaMode:       peerBoolFlag(fs, getenv, "quota-mode", "RATEWARDEN_QUOTA_MODE", "QUOTA_MODE", "every Envoy limit in quota_mode: over the limit is OK, with no duration_until_reset"),
		headerNames:     [3]string{getenv("LIMIT_LIMIT_HEADER"), getenv("LIMIT_REMAINING_HEADER"), getenv("LIMIT_RESET_HEADER")},
		configType:      peerFlag(fs, getenv, "config-type", "RATEWARDEN_CONFIG_TYPE", "CONFIG_TYPE", "file", "where the config comes from: file (--config) or xds (GRPC_XDS_SOTW: Envoy domains from an xDS management server, --xds-server)"),
		xdsServer:       peerFlag(fs, getenv, "xds-server", "RATEWARDEN_XDS_SERVER", "CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", "xDS management server address, with --config-type xds"),
		xdsNode:         peerFlag(fs, getenv, "xds-node-id", "RATEWARDEN_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_ID", "default", "node id announced to the xDS management server"),
		nearRatio:       peerFlag(fs, getenv, "near-limit-ratio", "RATEWARDEN_NEAR_LIMIT_RATIO", "NEAR_LIMIT_RATIO", "0.8", "share of a limit past which allowed hits count in ratewarden_near_limit_total"),
		tlsCert:         envFlag(fs, getenv, "tls-cert", "RATEWARDEN_TLS_CERT", "", "server certificate (PEM) for --tls-servers; reloaded when the file changes"),
		tlsKey:          envFlag(fs, getenv, "tls-key", "RATEWARDEN_TLS_KEY", "", "server key (PEM) for --tls-cert"),
		tlsClientCA:     envFlag(fs, getenv, "tls-client-ca", "RATEWARDEN_TLS_CLIENT_CA", "", "CA (PEM) that must have signed client certificates: mutual TLS"),
		tlsServers:      envFlag(fs, getenv, "tls-servers", "RATEWARDEN_TLS_SERVERS", "grpc,http", "the servers --tls-cert applies to: grpc, http (the HTTP and admin addresses) or both"),
		redisCA:         envFlag(fs, getenv, "redis-ca", "RATEWARDEN_REDIS_CA", "", "CA (PEM) for a rediss:// server's certificate (default: the system roots)"),
		redisCert:       envFlag(fs, getenv, "redis-cert", "RATEWARDEN_REDIS_CERT", "", "client certificate (PEM) for rediss://"),
		redisKey:        envFlag(fs, getenv, "redis-key", "RATEWARDEN_REDIS_KEY", "", "client key (PEM) for --redis-cert"),
		tracingOn:       peerBoolFlag(fs, getenv, "tracing", "RATEWARDEN_TRACING", "TRACING_ENABLED", "trace decisions with OpenTelemetry, exported over OTLP: a span per ShouldRateLimit call and per store call"),
		tracingEndpoint: envFlag(fs, getenv, "tracing-endpoint", "RATEWARDEN_TRACING_ENDPOINT", "", "OTLP endpoint, host:port (plaintext) or a URL (https:// for TLS); empty: the exporter's OTEL_EXPORTER_OTLP_* environment, else localhost"),
		tracingProtocol: peerFlag(fs, getenv, "tracing-protocol", "RATEWARDEN_TRACING_PROTOCOL", "TRACING_EXPORTER_PROTOCOL", "http", "OTLP protocol: http or grpc"),
		tracingSampling: peerFlag(fs, getenv, "tracing-sampling-rate", "RATEWARDEN_TRACING_SAMPLING_RATE", "TRACING_SAMPLING_RATE", "1", "share of traces sampled, 0 to 1 (a caller's sampled trace is always followed)"),
		tracingName:     peerFlag(fs, getenv, "tracing-service-name", "RATEWARDEN_TRACING_SERVICE_NAME", "TRACING_SERVICE_NAME", "ratewarden", "service.name of the spans"),
		secret:          envFlag(fs, getenv, "reservation-secret", "RATEWARDEN_RESERVATION_SECRET", "", "secret signing /v1/reserve's reservations, at least 16 bytes; comma-separated to rotate (the first signs, all are accepted); give every replica the same so that any settles any (prefer the environment variable); empty: a random secret of the process"),
		getenv:          getenv,
	}
}

// peerFlag is envFlag with a second variable, envoyproxy/ratelimit's
// name for the setting, read when the first is not set.
func peerFlag(fs *flag.FlagSet, getenv func(string) string, name, env, peerEnv, def, help string) *string {
	if v := getenv(env); v != "" {
		def = v
	} else if v := getenv(peerEnv); v != "" {
		def = v
	}
	return fs.String(name, def, help+" ($"+env+", else $"+peerEnv+")")
}

// defaultRLSHeaders is --rls-headers' default: what envoyproxy/ratelimit
// sends when its LIMIT_RESPONSE_HEADERS_ENABLED is set (envoy when true,
// none when false), else ratewarden.
func defaultRLSHeaders(getenv func(string) string) string {
	on, err := strconv.ParseBool(getenv("LIMIT_RESPONSE_HEADERS_ENABLED"))
	switch {
	case err != nil:
		return "ratewarden"
	case on:
		return "envoy"
	}
	return "none"
}

// serve runs "ratewarden serve": settings from the flags, then the
// wiring, then the service until ctx is done.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	penv, ignored, perr := peerEnv(getenv)
	if perr != nil {
		fmt.Fprintf(stderr, "ratewarden serve: %v\n", perr)
		return exitError
	}
	fs, f := newServeFlags(penv)
	pos, code, done := parseCommand(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(stderr, "serve", "unexpected arguments %q", pos)
	}
	err := func() error {
		st, err := f.settings()
		if err != nil {
			return err
		}
		st.peerIgnored = ignored
		if getenv("GOGC") == "" {
			defer gctune.Start(st.gcHeadroom)()
		}
		svc, err := wire(st, stderr)
		if err != nil {
			return err
		}
		defer svc.close()
		return svc.run(ctx)
	}()
	if err != nil {
		fmt.Fprintf(stderr, "ratewarden serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// settings are everything serve runs with, parsed from its flags and
// checked; nothing is started yet.
type settings struct {
	httpAddr, grpcAddr string
	configPaths        []string // nil: the built-in config
	redisURL           string   // "": in memory, single node
	token              string
	failure            fallback.Policy
	replicas           int
	redisTimeout       time.Duration
	leaseSize          int64  // 0: no leases
	gcHeadroom         uint64 // bytes; 0: Go's pacing
	reload, grace      time.Duration
	logLevel           slog.Level
	logJSON            bool
	inline             bool
	maxKeyBytes        int
	adminAddr          string
	envoy              rls.EnvoyCompat
	nearRatio          float64
	xds                *xdsSettings // nil: config from files
	tls                tlsfiles.Server
	tlsGRPC, tlsHTTP   bool
	redisTLS           tlsfiles.Client
	peerIgnored        []string         // envoyproxy/ratelimit variables set that change nothing
	tracing            *tracingSettings // nil: off
	secrets            [][]byte         // nil: the server's random secret
}

// settings parses and checks the flags' values. Its errors name the flag.
func (f serveFlags) settings() (settings, error) {
	st := settings{httpAddr: *f.httpAddr, grpcAddr: *f.grpcAddr, redisURL: *f.redisURL, token: *f.token, adminAddr: *f.adminAddr}
	if *f.cfgPaths != "" {
		st.configPaths = strings.Split(*f.cfgPaths, ",")
	}
	if err := st.logLevel.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return st, fmt.Errorf("--log-level %q: want debug, info, warn or error", *f.logLevel)
	}
	switch *f.logFormat {
	case "text":
	case "json":
		st.logJSON = true
	default:
		return st, fmt.Errorf("--log-format %q: want text or json", *f.logFormat)
	}
	var err error
	if st.failure, err = fallback.ParsePolicy(*f.failure); err != nil {
		return st, fmt.Errorf("--failure-policy: %w", err)
	}
	if st.replicas, err = strconv.Atoi(*f.replicas); err != nil || st.replicas < 1 {
		return st, fmt.Errorf("--replicas %q: want a whole number >= 1", *f.replicas)
	}
	// 0 would make every Redis call fail at once.
	if st.redisTimeout, err = duration("--redis-timeout", *f.redisTimeout, false); err != nil {
		return st, err
	}
	if st.leaseSize, err = strconv.ParseInt(*f.leaseSize, 10, 64); err != nil || st.leaseSize < 0 {
		return st, fmt.Errorf("--lease-size %q: want a whole number >= 0", *f.leaseSize)
	}
	if st.leaseSize > 0 && st.redisURL == "" {
		return st, fmt.Errorf("--lease-size %d needs --redis: leases take capacity from Redis (in memory, every check is local already)", st.leaseSize)
	}
	if st.gcHeadroom, err = byteSize("--gc-headroom", *f.gcHeadroom); err != nil {
		return st, err
	}
	if st.reload, err = duration("--reload-interval", *f.reload, true); err != nil {
		return st, err
	}
	if st.grace, err = duration("--shutdown-grace", *f.grace, true); err != nil {
		return st, err
	}
	return st, f.exposure(&st)
}

// exposure parses the flags on what callers may do: inline limits and
// the key cap.
func (f serveFlags) exposure(st *settings) error {
	var err error
	if st.inline, err = strconv.ParseBool(*f.inline); err != nil {
		return fmt.Errorf("--inline-limits %q: want true or false", *f.inline)
	}
	if st.maxKeyBytes, err = strconv.Atoi(*f.maxKeyBytes); err != nil || st.maxKeyBytes < 1 {
		return fmt.Errorf("--max-key-bytes %q: want a whole number >= 1", *f.maxKeyBytes)
	}
	if err := f.envoyCompat(st); err != nil {
		return err
	}
	if st.tracing, err = f.tracing(); err != nil {
		return err
	}
	if st.secrets, err = f.reservationSecrets(); err != nil {
		return err
	}
	return f.deployment(st)
}

// reservationSecrets parses --reservation-secret: nil when not given.
// Its errors never show a secret.
func (f serveFlags) reservationSecrets() ([][]byte, error) {
	if *f.secret == "" {
		return nil, nil
	}
	var out [][]byte
	for i, sec := range strings.Split(*f.secret, ",") {
		if len(sec) < api.MinSecretBytes {
			return nil, fmt.Errorf("--reservation-secret: secret %d of %d is %d bytes, want at least %d (32 random bytes, base64-encoded, say)", i+1, strings.Count(*f.secret, ",")+1, len(sec), api.MinSecretBytes)
		}
		out = append(out, []byte(sec))
	}
	return out, nil
}

// envoyCompat parses the flags of envoyproxy/ratelimit's settings.
func (f serveFlags) envoyCompat(st *settings) error {
	e := &st.envoy
	switch *f.rlsHeaders {
	case "ratewarden":
	case "envoy":
		e.Headers = rls.HeadersEnvoy
	case "none":
		e.Headers = rls.HeadersNone
	default:
		return fmt.Errorf("--rls-headers %q: want ratewarden, envoy or none", *f.rlsHeaders)
	}
	e.LimitHeader, e.RemainingHeader, e.ResetHeader = f.headerNames[0], f.headerNames[1], f.headerNames[2]
	for _, b := range []struct {
		flag string
		val  *string
		dst  *bool
	}{
		{"--merge-domains", f.mergeDomains, &e.MergeDomains},
		{"--response-dynamic-metadata", f.dynMeta, &e.DynamicMetadata},
		{"--shadow-mode", f.shadowMode, &e.ShadowMode},
		{"--quota-mode", f.quotaMode, &e.QuotaMode},
	} {
		v, err := strconv.ParseBool(*b.val)
		if err != nil {
			return fmt.Errorf("%s %q: want true or false", b.flag, *b.val)
		}
		*b.dst = v
	}
	return nil
}

// duration parses the value of flag name: a duration above 0, or at
// least 0 when zeroOK.
func duration(name, v string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case !zeroOK && (err != nil || d <= 0):
		return 0, fmt.Errorf("%s %q: want a duration > 0 such as 50ms, 1s", name, v)
	case err != nil || d < 0:
		return 0, fmt.Errorf("%s %q: want a duration such as 50ms, 1s", name, v)
	}
	return d, nil
}

// byteSize parses a size such as 65536, 512KiB, 64MiB or 1GiB, up to
// 1TiB (gctune.MaxHeadroom), for the flag name.
func byteSize(name, v string) (uint64, error) {
	num, unit := v, uint64(1)
	for _, u := range []struct {
		suffix string
		bytes  uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, unit = n, u.bytes
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > gctune.MaxHeadroom/unit {
		return 0, fmt.Errorf("%s %q: want a size up to 1TiB such as 64MiB, 512KiB or 0", name, v)
	}
	return n * unit, nil
}

// service is serve's wiring: the logger, the backend and the server built
// from settings, not yet listening.
type service struct {
	st           settings
	log          *slog.Logger
	builtin      *config.Config // the built-in config, without --config
	srv          *server.Server
	closeBackend func()
	stopHUP      func()
	tracer       *sdktrace.TracerProvider // nil without --tracing
}

// wire builds the service from st: the logger (on stderr), the config
// (built in or st.configPaths, loaded now), the backend (memory or Redis,
// connected now) and the server.
func wire(st settings, stderr io.Writer) (*service, error) {
	svc := &service{st: st, log: newLogger(st, stderr), closeBackend: func() {}, stopHUP: func() {}}
	opts := []server.Option{
		server.WithLogger(svc.log),
		server.WithAPIToken(st.token),
		server.WithDefaultFailure(st.failure),
		server.WithReloadInterval(st.reload),
		server.WithInlineLimits(config.InlineLimits{Enabled: st.inline}),
		server.WithMaxKeyBytes(st.maxKeyBytes),
		server.WithAdminAddr(st.adminAddr),
		server.WithEnvoyCompat(st.envoy),
		server.WithNearLimitRatio(st.nearRatio),
	}
	if st.secrets != nil {
		opts = append(opts, server.WithReservationSecrets(st.secrets...))
	}
	opts = append(opts, st.tlsOptions()...)
	if st.tracing != nil {
		tp, err := st.tracing.provider(context.Background())
		if err != nil {
			return nil, err
		}
		svc.tracer = tp
		opts = append(opts, server.WithTracerProvider(tp))
	}
	if st.configPaths == nil {
		var err error
		if svc.builtin, err = config.Parse("built-in default config", defaultConfig); err != nil {
			return nil, err
		}
		opts = append(opts, server.WithConfig(svc.builtin))
	} else {
		opts = append(opts, server.WithConfigPaths(st.configPaths...))
	}
	be, closeBackend, err := newBackend(st, svc.log)
	if err != nil {
		svc.close() // the tracer provider
		return nil, err
	}
	svc.closeBackend = closeBackend
	if svc.srv, err = server.New(be, opts...); err != nil {
		svc.close()
		return nil, err
	}
	noReload := ""
	switch {
	case st.xds != nil:
		noReload = "the Envoy domains come from the xDS management server"
	case svc.builtin != nil:
		noReload = "the built-in config is in use (give --config)"
	}
	svc.stopHUP = reloadOnHUP(svc.srv, svc.log, noReload)
	return svc, nil
}

// newLogger is the slog logger st asks for, writing to w.
func newLogger(st settings, w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: st.logLevel}
	if st.logJSON {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}

// newBackend is the in-memory backend without a Redis URL, else Redis.
func newBackend(st settings, log *slog.Logger) (decide.Backend, func(), error) {
	if st.redisURL == "" {
		m, err := backend.NewMemory(st.maxKeyBytes)
		if err != nil {
			return nil, nil, err
		}
		return m, func() { _ = m.Close() }, nil
	}
	r, err := backend.NewRedis(st.redisURL,
		backend.WithTLS(st.redisTLS),
		backend.WithTimeout(st.redisTimeout),
		backend.WithLeaseSize(st.leaseSize),
		backend.WithReplicas(st.replicas),
		backend.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	return r, func() {
		// Only leases fail to close (--lease-size): their units then count
		// until their windows end. One line, whatever the number of leases.
		if err := r.Close(); err != nil {
			msg := err.Error()
			first, _, _ := strings.Cut(msg, "\n")
			log.Warn("unused leased units were not all given back to Redis: they count until their windows end", "err", first, "failures", strings.Count(msg, "\n")+1)
		}
	}, nil
}

// run listens and serves until ctx is done, then shuts down within the
// grace. The words on what it decides with (memory or Redis) come once it
// listens, never before a startup error.
func (s *service) run(ctx context.Context) error {
	if err := s.srv.Start(s.st.httpAddr, s.st.grpcAddr); err != nil {
		return err
	}
	for _, v := range s.st.peerIgnored {
		s.log.Warn("envoyproxy/ratelimit variable ignored", "why", v)
	}
	if s.st.xds != nil {
		stop, err := s.startXDS()
		if err != nil {
			_ = s.srv.Shutdown(context.Background())
			return err
		}
		defer stop()
	} else if s.builtin != nil {
		s.log.Info("no --config given: using the built-in default config", "policies", len(s.builtin.Policies))
	}
	if s.st.redisURL == "" {
		s.log.Warn("no Redis configured (--redis / RATEWARDEN_REDIS_URL): deciding in memory on this node only; limits are per process, not shared")
	} else {
		s.log.Info("deciding on Redis", "url", redisstore.RedactURL(s.st.redisURL), "default_failure_policy", s.st.failure, "replicas", s.st.replicas)
		if s.st.secrets == nil {
			s.log.Warn("no --reservation-secret (RATEWARDEN_RESERVATION_SECRET): reservations from /v1/reserve settle only on the replica that made them, and not after it restarts; give every replica the same secret")
		}
	}
	<-ctx.Done()
	s.log.Info("shutting down", "grace", s.st.grace)
	sctx, cancel := context.WithTimeout(context.Background(), s.st.grace)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		return err
	}
	s.log.Info("stopped")
	return nil
}

// close stops the SIGHUP handler, releases the backend and flushes the
// spans not exported yet (for up to 5 s).
func (s *service) close() {
	s.stopHUP()
	s.closeBackend()
	if s.tracer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.tracer.Shutdown(ctx); err != nil {
			s.log.Warn("tracing: spans not exported at shutdown", "err", err)
		}
	}
}

// reloadOnHUP reloads srv's config on SIGHUP (which must not kill the
// process, its default action) until the returned function is called.
// noReload, when not empty, says why there is nothing to reload.
func reloadOnHUP(srv *server.Server, log *slog.Logger, noReload string) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if noReload != "" {
					log.Warn("SIGHUP: nothing to reload; " + noReload)
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
