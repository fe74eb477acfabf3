// Package server is ratewarden's network face, assembled: it builds the
// HTTP API (package api) and Envoy's rate limit gRPC service (package
// rls) on one Backend and one configuration, and owns what they share and
// their lifecycle: the options (validated in one place, New), the
// configuration in force (loaded from files and reloaded when they change
// through package watch, or put in force with SetConfig, as package xds
// does), the HTTP mux (the /v1 API, /json and /healthcheck as
// envoyproxy/ratelimit has them, /healthz, /readyz, /metrics, the
// /rlconfig dump, an optional admin address), the gRPC server (the rate
// limit service, gRPC health kept in step with Ready, reflection), TLS
// with certificate reload (internal/tlsfiles), tracing, and a graceful
// Shutdown.
//
// A Server decides on a Backend, which hands it one ratewarden.Store per
// failure policy: the in-memory store on a single node, or Redis behind the
// fallback decorator when distributed. It is a client of the library:
// both APIs decide through the one ratewarden.Limiter per failure policy
// that package decide keeps (a request's descriptors of several policies
// through one Limiter.AllowKeys), metered by package telemetry. The
// tokens the API hands out carry what the Limiter needs to take a
// reservation or a permit back on any replica (Limiter.ReservationOf,
// Limiter.PermitOf), which then settles, releases or extends it.
//
// Callers are not trusted (docs/service.md, "Security"): request bodies
// and descriptors are parsed strictly and bounded (body and key bytes,
// descriptors, inline limits, which are off unless enabled) before any
// store call, and errors answer with a problem type and a fixed message,
// their details going to the log and the metrics.
//
// The arrows point one way: server imports api, rls, watch, decide and
// telemetry (and, of the project, the root package, fallback,
// internal/nilcheck, service/config and service/internal/tlsfiles); api
// and rls import decide and telemetry, never each other; decide imports
// telemetry; nothing below imports server.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/ratewarden/ratewarden/service/server/api"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/rls"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
	"github.com/ratewarden/ratewarden/service/server/watch"
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
	paths          []string // nil: the config does not come from files
	interval       time.Duration
	adminAddr      string
	envoy          rls.EnvoyCompat
	grpcTLS        *tls.Config // nil: plaintext
	httpTLS        *tls.Config // nil: plaintext
	reg            *prometheus.Registry
	m              *telemetry.Metrics
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

// New returns a Server deciding on backend. It needs WithConfig or
// WithConfigPaths; with paths, it loads them now and fails when they are
// invalid, and with WithTLS it reads the TLS files now. Errors wrap
// ratewarden.ErrInvalidConfig and name the option at fault; a nil Option
// is one too.
func New(backend decide.Backend, opts ...Option) (*Server, error) {
	if nilcheck.Is(backend) {
		return nil, fmt.Errorf("server: backend must not be nil%s: %w", nilcheck.Describe(backend), ratewarden.ErrInvalidConfig)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{
		backend:        backend,
		log:            c.log,
		defaultFailure: c.defaultFailure,
		paths:          c.paths,
		interval:       c.interval,
		adminAddr:      c.adminAddr,
		envoy:          c.envoy,
		reg:            prometheus.NewRegistry(),
		health:         health.NewServer(),
		stop:           make(chan struct{}),
	}
	if c.tlsOn != 0 {
		tc, err := c.tls.Config(c.log)
		if err != nil {
			return nil, fmt.Errorf("server: WithTLS: %w", err)
		}
		if c.tlsOn&TLSGRPC != 0 {
			s.grpcTLS = tc
		}
		if c.tlsOn&TLSHTTP != 0 {
			s.httpTLS = tc
		}
	}
	var tracer trace.Tracer // nil: no spans
	if c.tracer != nil {
		tracer = c.tracer.Tracer(tracerName)
	}
	s.m = telemetry.New(s.reg, backend.Breakers)
	lims := decide.NewLimiters(backend, s.m, tracer)
	s.api = api.New(api.Deps{Log: c.log, Metrics: s.m, Limiters: lims, Token: c.token, MaxBody: c.maxBody, MaxKey: c.maxKey,
		Inline: c.inline, DefaultFailure: c.defaultFailure, Secrets: c.secrets})
	s.rls = rls.New(rls.Deps{Log: c.log, Metrics: s.m, Limiters: lims, Tracer: tracer, MaxKey: c.maxKey,
		Envoy: c.envoy, NearRatio: c.nearRatio, DefaultFailure: c.defaultFailure})
	if c.pathsGiven {
		if err := s.Reload(); err != nil {
			return nil, err
		}
	} else {
		s.setConfig(c.cfg, "static", "")
	}
	s.m.ConfigOK.Set(1)
	return s, nil
}

// Registry is the Prometheus registry the server's /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

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
