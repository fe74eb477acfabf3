// Package server is ratewarden's network face: an HTTP JSON API (check,
// peek, reset; reserve and settle costs known afterwards; acquire,
// release and extend permits of concurrency limits), Envoy's rate limit
// gRPC service
// (envoy.service.ratelimit.v3.RateLimitService), gRPC health, Prometheus
// metrics, health and readiness endpoints, and configuration hot reload;
// and envoyproxy/ratelimit's deployment surface: /json, /healthcheck, the
// /rlconfig dump, configurations pushed with SetConfig (package xds),
// TLS with certificate reload, near-limit counts and OpenTelemetry spans.
//
// A Server decides on a Backend, which hands it one ratewarden.Store per
// failure policy: the in-memory store on a single node, or Redis behind the
// fallback decorator when distributed. It is a client of the library: it
// builds one ratewarden.Limiter per failure policy on its store, and every
// check, peek, reset, reservation and acquisition goes through a Limiter
// (a request's descriptors of several policies through one
// Limiter.AllowKeys). The tokens the API hands out carry what the Limiter
// needs to take a reservation or a permit back on any replica
// (Limiter.ReservationOf, Limiter.PermitOf), which then settles, releases
// or extends it.
//
// Callers are not trusted (docs/service.md, "Security"): request bodies
// and descriptors are parsed strictly and bounded (body and key bytes,
// descriptors, inline limits, which are off unless enabled) before any
// store call, and errors answer with a problem type and a fixed message,
// their details going to the log and the metrics.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/api"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/rls"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
	"github.com/ratewarden/ratewarden/service/server/watch"
)

// Defaults.
const (
	DefaultMaxBodyBytes = 64 << 10
	// DefaultMaxKeyBytes caps a caller key (HTTP "key") and the key
	// derived from an Envoy request's descriptor entries.
	DefaultMaxKeyBytes    = 1 << 10
	DefaultReloadInterval = time.Second
)

// grpcStreamWorkers is the number of goroutines that serve gRPC calls
// (grpc.NumStreamWorkers): as many as the calls in flight at once that a
// busy replica sees (64 callers and more, each waiting a Redis round
// trip), each idle one a few KiB of stack.
const grpcStreamWorkers = 128

// Server serves the APIs. Make one with New, then Start it, or use its
// handlers (Handler, RegisterGRPC) in servers of your own.
type Server struct {
	backend        decide.Backend
	log            *slog.Logger
	defaultFailure fallback.Policy
	paths          []string
	interval       time.Duration
	maxKey         int
	adminAddr      string
	envoy          rls.EnvoyCompat
	nearRatio      float64
	grpcTLS        *tls.Config
	httpTLS        *tls.Config
	tracer         trace.Tracer // nil: no tracing
	reg            *prometheus.Registry
	m              *telemetry.Metrics
	lims           *decide.Limiters
	api            *api.Service
	rls            *rls.Service

	snap atomic.Pointer[snapshot]

	reloadMu    sync.Mutex
	fingerprint string

	health   *health.Server
	httpSrv  *http.Server
	grpcSrv  *grpc.Server
	httpLn   net.Listener
	grpcLn   net.Listener
	adminSrv *http.Server
	adminLn  net.Listener
	stop     chan struct{}
	wg       sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
}

// snapshot is a loaded config with what the server derives from it.
type snapshot struct {
	cfg      *config.Config
	failures []fallback.Policy // every failure policy in use
	loaded   time.Time
	source   string // file, static or xds
	version  string // the xDS version, or the files' fingerprint
}

// Option configures a Server; pass options to New, which validates what
// they collected.
type Option func(*options)

// options is what the options of New collect, on top of its defaults.
type options struct {
	cfg            *config.Config
	cfgGiven       bool
	paths          []string
	pathsGiven     bool
	interval       time.Duration
	log            *slog.Logger
	token          string
	defaultFailure fallback.Policy
	maxBody        int64
	maxKey         int
	inline         config.InlineLimits
	adminAddr      string
	envoy          rls.EnvoyCompat
	nearRatio      float64
	grpcTLS        *tls.Config
	httpTLS        *tls.Config
	tracer         trace.TracerProvider
	secrets        [][]byte
	secretsGiven   bool
}

// WithConfig sets a configuration that is already loaded (no reload).
func WithConfig(cfg *config.Config) Option {
	return func(o *options) { o.cfg, o.cfgGiven = cfg, true }
}

// WithConfigPaths loads the configuration from files or directories and
// reloads it when their contents change, about 50 ms after a settled
// change (filesystem notifications, and polling every WithReloadInterval
// as the fallback), or when Reload is called (on SIGHUP, say). With
// EnvoyCompat.MergeDomains, documents of one domain are merged.
func WithConfigPaths(paths ...string) Option {
	return func(o *options) { o.paths, o.pathsGiven = paths, true }
}

// WithReloadInterval sets how often config files are polled for changes,
// the fallback for filesystems without notifications; 0 turns watching
// off, notifications too (Reload still works). Default one second.
func WithReloadInterval(d time.Duration) Option {
	return func(o *options) { o.interval = d }
}

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithAPIToken requires "Authorization: Bearer <token>" on the /v1 API.
// Empty means no authentication (the default).
func WithAPIToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithDefaultFailure sets the failure policy of limits whose config names
// none (directly, by domain or by the top-level failure_policy). Default
// local_fallback.
func WithDefaultFailure(fp fallback.Policy) Option {
	return func(o *options) { o.defaultFailure = fp }
}

// WithMaxBodyBytes bounds HTTP API request bodies (413 beyond);
// default 64 KiB.
func WithMaxBodyBytes(n int64) Option {
	return func(o *options) { o.maxBody = n }
}

// WithMaxKeyBytes caps the bytes of a caller key: the HTTP API's "key"
// (400 beyond) and the store key an Envoy descriptor's entries make
// (INVALID_ARGUMENT beyond). Default DefaultMaxKeyBytes (1 KiB).
func WithMaxKeyBytes(n int) Option {
	return func(o *options) { o.maxKey = n }
}

// WithInlineLimits sets whether the HTTP API takes inline limits ("limit"
// instead of "policy") and their maxima; a config's inline_limits, when
// set, gives the maxima instead, and enables them too. Default: off (403).
func WithInlineLimits(il config.InlineLimits) Option {
	return func(o *options) { o.inline = il }
}

// WithAdminAddr serves /metrics and the detailed /readyz on a separate
// address (Start listens on it; see AdminAddr), and not on the API's.
// Empty (the default): everything on the HTTP address.
func WithAdminAddr(addr string) Option {
	return func(o *options) { o.adminAddr = addr }
}

// validate names the first option given a value it cannot use.
func (o *options) validate() error {
	var msg string
	switch {
	case o.cfgGiven && o.cfg == nil:
		msg = "WithConfig: config must not be nil"
	case o.pathsGiven && len(o.paths) == 0:
		msg = "WithConfigPaths: no config paths given"
	case o.cfgGiven && o.pathsGiven:
		msg = "give WithConfig or WithConfigPaths, not both"
	case !o.cfgGiven && !o.pathsGiven:
		msg = "no configuration (WithConfig or WithConfigPaths)"
	case o.interval < 0:
		msg = fmt.Sprintf("WithReloadInterval: reload interval must be >= 0, got %v", o.interval)
	case o.log == nil:
		msg = "WithLogger: logger must not be nil"
	case o.maxBody <= 0:
		msg = fmt.Sprintf("WithMaxBodyBytes: max body bytes must be > 0, got %d", o.maxBody)
	case o.maxKey <= 0:
		msg = fmt.Sprintf("WithMaxKeyBytes: max key bytes must be > 0, got %d", o.maxKey)
	case !(o.nearRatio > 0 && o.nearRatio <= 1):
		msg = fmt.Sprintf("WithNearLimitRatio: want a ratio above 0, at most 1, got %v", o.nearRatio)
	case o.envoy.Headers < rls.HeadersRatewarden || o.envoy.Headers > rls.HeadersNone:
		msg = fmt.Sprintf("WithEnvoyCompat: unknown Headers %d", o.envoy.Headers)
	case o.inline.MaxPeriod < 0 || o.inline.MaxRate < 0 || o.inline.MaxSlidingLog < 0 || o.inline.MaxCost < 0:
		msg = fmt.Sprintf("WithInlineLimits: maxima must not be negative, got %+v", o.inline)
	default:
		if _, err := o.defaultFailure.MarshalText(); err != nil { // a policy fallback knows
			return fmt.Errorf("server: WithDefaultFailure: %w", err)
		}
		return nil
	}
	return fmt.Errorf("server: %s: %w", msg, ratewarden.ErrInvalidConfig)
}

// New returns a Server deciding on backend. It needs WithConfig or
// WithConfigPaths; with paths, it loads them now and fails when they are
// invalid. Errors wrap ratewarden.ErrInvalidConfig and name the option at
// fault; a nil Option is one too.
func New(backend decide.Backend, opts ...Option) (*Server, error) {
	if nilcheck.Is(backend) {
		return nil, fmt.Errorf("server: backend must not be nil%s: %w", nilcheck.Describe(backend), ratewarden.ErrInvalidConfig)
	}
	o := options{
		log:            slog.Default(),
		defaultFailure: fallback.LocalFallback,
		interval:       DefaultReloadInterval,
		maxBody:        DefaultMaxBodyBytes,
		maxKey:         DefaultMaxKeyBytes,
		nearRatio:      DefaultNearLimitRatio,
	}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("server: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := o.validateSecrets(); err != nil {
		return nil, err
	}
	s := &Server{
		backend:        backend,
		log:            o.log,
		defaultFailure: o.defaultFailure,
		paths:          o.paths,
		interval:       o.interval,
		maxKey:         o.maxKey,
		adminAddr:      o.adminAddr,
		envoy:          o.envoy,
		nearRatio:      o.nearRatio,
		grpcTLS:        o.grpcTLS,
		httpTLS:        o.httpTLS,
		reg:            prometheus.NewRegistry(),
		health:         health.NewServer(),
		stop:           make(chan struct{}),
	}
	if o.tracer != nil {
		s.tracer = o.tracer.Tracer(tracerName)
	}
	s.m = telemetry.New(s.reg, backend.Breakers)
	s.lims = decide.NewLimiters(backend, s.m, s.tracer)
	s.api = api.New(api.Deps{Log: s.log, Metrics: s.m, Limiters: s.lims, Token: o.token, MaxBody: o.maxBody, MaxKey: o.maxKey,
		Inline: o.inline, DefaultFailure: o.defaultFailure, Secrets: o.secrets})
	s.rls = rls.New(rls.Deps{Log: s.log, Metrics: s.m, Limiters: s.lims, Tracer: s.tracer, MaxKey: s.maxKey,
		Envoy: s.envoy, NearRatio: s.nearRatio, DefaultFailure: s.defaultFailure})
	if o.pathsGiven {
		if err := s.Reload(); err != nil {
			return nil, err
		}
	} else {
		s.setConfig(o.cfg, "static", "")
	}
	s.m.ConfigOK.Set(1)
	return s, nil
}

// Registry is the Prometheus registry the server's /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Config returns the configuration in force.
func (s *Server) Config() *config.Config { return s.snap.Load().cfg }

func (s *Server) setConfig(cfg *config.Config, source, version string) {
	sn := &snapshot{cfg: cfg, loaded: time.Now(), source: source, version: version}
	add := func(fp fallback.Policy) {
		if !slices.Contains(sn.failures, fp) {
			sn.failures = append(sn.failures, fp)
		}
	}
	for _, p := range cfg.Policies {
		add(decide.Failure(cfg, s.defaultFailure, p.Failure))
	}
	for _, d := range cfg.Domains {
		var walk func([]*config.Descriptor)
		walk = func(ds []*config.Descriptor) {
			for _, n := range ds {
				if n.RateLimit != nil && n.RateLimit.Counted() {
					add(decide.Failure(cfg, s.defaultFailure, n.RateLimit.Failure, d.Failure))
				}
				walk(n.Descriptors)
			}
		}
		walk(d.Descriptors)
	}
	// By name, as /readyz and Ready's error list them.
	slices.SortFunc(sn.failures, func(a, b fallback.Policy) int { return strings.Compare(a.String(), b.String()) })
	s.api.SetConfig(cfg)
	s.rls.SetConfig(cfg)
	s.snap.Store(sn)
	s.m.SetVersion(source, version)
}

// loaded is the fingerprint of the config files in force.
func (s *Server) loaded() string {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.fingerprint
}

// Reload loads the config paths again. When they are invalid it logs every
// problem, counts a failed reload and keeps the configuration in force.
func (s *Server) Reload() error {
	if s.paths == nil {
		return fmt.Errorf("server: no config paths to reload: %w", ratewarden.ErrInvalidConfig)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if fp, err := config.Fingerprint(s.paths...); err == nil {
		s.fingerprint = fp
	}
	cfg, err := config.Loader{MergeDomains: s.envoy.MergeDomains}.Load(s.paths...)
	first := s.snap.Load() == nil
	if err != nil {
		s.m.Reloads.WithLabelValues("failure").Inc()
		s.m.ConfigOK.Set(0)
		if !first {
			s.log.Error("config reload failed; keeping the configuration in force", "paths", s.paths, "err", err)
		}
		return err
	}
	s.setConfig(cfg, "file", shortVersion(s.fingerprint))
	s.m.Reloads.WithLabelValues("success").Inc()
	s.m.ConfigOK.Set(1)
	for _, w := range cfg.Warnings {
		s.log.Warn("config: ignored", "where", w.String())
	}
	s.log.Info("config loaded", "files", cfg.Files, "policies", len(cfg.Policies), "domains", len(cfg.Domains), "reload", !first)
	return nil
}

// Ready reports nil when the server can decide with the shared store:
// a config is loaded and, for every failure policy in use except
// fail_open, the backend is ready. Its error names the failure policies
// that are not and why (for logs; /readyz names only the policies).
func (s *Server) Ready(ctx context.Context) error {
	_, err := s.degraded(ctx)
	return err
}

// degraded lists the failure policies in use whose limits the shared
// store cannot decide now, with the reasons joined in err; err alone
// when no configuration is loaded.
func (s *Server) degraded(ctx context.Context) ([]fallback.Policy, error) {
	sn := s.snap.Load()
	if sn == nil {
		return nil, errors.New("server: no configuration loaded")
	}
	var fps []fallback.Policy
	var errs []error
	for _, fp := range sn.failures {
		if fp == fallback.FailOpen {
			continue
		}
		if err := s.backend.Ready(ctx, fp); err != nil {
			fps = append(fps, fp)
			errs = append(errs, fmt.Errorf("server: %s limits: %w", fp, err))
		}
	}
	return fps, errors.Join(errs...)
}

// handleReady answers /readyz: 200 "ready", or 503 "not ready" naming,
// when detailed, the failure policies whose limits are degraded (decided
// by that policy, not the shared store). Never an address or an error:
// those go to the log.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request, detailed bool) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fps, err := s.degraded(ctx)
	if err == nil {
		_, _ = io.WriteString(w, "ready\n")
		return
	}
	s.log.Debug("readyz: not ready", "err", err)
	w.WriteHeader(http.StatusServiceUnavailable)
	switch {
	case !detailed:
		_, _ = io.WriteString(w, "not ready\n")
	case len(fps) == 0:
		_, _ = io.WriteString(w, "not ready: no configuration loaded\n")
	default:
		names := make([]string, len(fps))
		for i, fp := range fps {
			names[i] = fp.String()
		}
		_, _ = io.WriteString(w, "not ready: shared store unavailable; degraded: "+strings.Join(names, ", ")+"\n")
	}
}

// Start listens on httpAddr and grpcAddr (":0" picks free ports; see
// HTTPAddr and GRPCAddr) and serves until Shutdown.
func (s *Server) Start(httpAddr, grpcAddr string) error {
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("server: http listen: %w", err)
	}
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		hl.Close()
		return fmt.Errorf("server: grpc listen: %w", err)
	}
	if s.adminAddr != "" {
		al, err := net.Listen("tcp", s.adminAddr)
		if err != nil {
			hl.Close()
			gl.Close()
			return fmt.Errorf("server: admin listen: %w", err)
		}
		s.adminLn = al
		s.adminSrv = s.newHTTPServer(s.AdminHandler())
		s.wg.Add(1)
		go s.serveHTTP(s.adminSrv, al, "admin")
	}
	s.httpLn, s.grpcLn = hl, gl
	s.httpSrv = s.newHTTPServer(s.Handler())
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.ForceServerCodecV2(rls.Codec()),
		// Calls run on long-lived workers, whose stacks have grown to
		// what a decision needs, instead of a new goroutine each that
		// grows (copies) its stack on every call: that copying cost more
		// CPU than the decision in profiles. More calls at once than
		// workers get goroutines, as without workers.
		grpc.NumStreamWorkers(grpcStreamWorkers),
	}
	if s.grpcTLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(s.grpcTLS)))
	}
	s.grpcSrv = grpc.NewServer(gopts...)
	s.RegisterGRPC(s.grpcSrv)

	s.wg.Add(3)
	go s.serveHTTP(s.httpSrv, hl, "http")
	go func() {
		defer s.wg.Done()
		if err := s.grpcSrv.Serve(gl); err != nil {
			s.log.Error("grpc server stopped", "err", err)
		}
	}()
	go s.readiness()
	if s.paths != nil && s.interval > 0 {
		w := &watch.Files{Paths: s.paths, Every: s.interval, Log: s.log, Loaded: s.loaded, Reload: func() { _ = s.Reload() }} // Reload logs
		s.wg.Add(1)
		go func() { defer s.wg.Done(); w.Run(s.stop) }()
	}
	if s.adminLn != nil {
		s.log.Info("listening", "http", hl.Addr().String(), "grpc", gl.Addr().String(), "admin", s.adminLn.Addr().String())
	} else {
		s.log.Info("listening", "http", hl.Addr().String(), "grpc", gl.Addr().String())
	}
	return nil
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	var tc *tls.Config
	if s.httpTLS != nil {
		tc = s.httpTLS.Clone()
	}
	return &http.Server{
		TLSConfig:         tc,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

func (s *Server) serveHTTP(srv *http.Server, ln net.Listener, what string) {
	defer s.wg.Done()
	var err error
	if srv.TLSConfig != nil {
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error(what+" server stopped", "err", err)
	}
}

// AdminAddr is the address the admin server listens on, after Start;
// empty without WithAdminAddr.
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// readiness keeps the gRPC health status in step with Ready.
func (s *Server) readiness() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.Ready(ctx)
		cancel()
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			s.health.SetServingStatus("", st)
			s.health.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, st)
			if err != nil {
				s.log.Warn("not ready", "err", err)
			} else if last != healthpb.HealthCheckResponse_UNKNOWN {
				s.log.Info("ready again")
			}
			last = st
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// HTTPAddr is the address the HTTP server listens on, after Start.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }

// GRPCAddr is the address the gRPC server listens on, after Start.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// Shutdown stops accepting, lets requests in flight finish until ctx ends,
// then closes what is left. It is safe to call more than once and from
// several goroutines: the first call shuts down, the others wait for it
// and return its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	close(s.stop)
	s.health.Shutdown()
	var errs []error
	if s.httpSrv != nil {
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("server: http shutdown: %w", err))
			s.httpSrv.Close()
		}
	}
	if s.adminSrv != nil {
		if err := s.adminSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("server: admin shutdown: %w", err))
			s.adminSrv.Close()
		}
	}
	if s.grpcSrv != nil {
		done := make(chan struct{})
		go func() { s.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpcSrv.Stop()
			<-done
			errs = append(errs, fmt.Errorf("server: grpc shutdown: %w", ctx.Err()))
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// Run starts the server and serves until ctx is done, then shuts down
// gracefully, giving requests in flight up to grace to finish.
func (s *Server) Run(ctx context.Context, httpAddr, grpcAddr string, grace time.Duration) error {
	if err := s.Start(httpAddr, grpcAddr); err != nil {
		return err
	}
	<-ctx.Done()
	s.log.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return s.Shutdown(sctx)
}

// RegisterGRPC registers the rate limit service, gRPC health and server
// reflection (so grpcurl needs no .proto files) on g. The server Start
// makes also decodes requests so that invalid UTF-8 is INVALID_ARGUMENT
// with the field path; on a grpc.Server of your own it is INTERNAL, as
// grpc-go answers every decoding error.
func (s *Server) RegisterGRPC(g *grpc.Server) {
	rlspb.RegisterRateLimitServiceServer(g, s.rls)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
}
