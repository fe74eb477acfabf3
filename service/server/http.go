package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratewarden/ratewarden/fallback"
)

// Handler returns the HTTP handler: the /v1 API, envoyproxy/ratelimit's
// /json and /healthcheck, /healthz, /readyz and, unless an admin address
// is set (WithAdminAddr), /metrics and the config dump /rlconfig. Every 4xx and
// 5xx answer, 404 and 405 included, is application/problem+json, but for
// /json's and /healthcheck's, which answer as envoyproxy/ratelimit does.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.api.Register(mux)
	mux.Handle("/json", s.api.Guard(s.rls.HandleJSON)) // the API token applies as on /v1
	mux.Handle("/healthcheck", http.HandlerFunc(s.handleHealthcheck))
	s.probes(mux, s.adminAddr == "")
	return mux
}

// AdminHandler returns the admin handler: /metrics, /rlconfig, /healthz and /readyz
// with the failure policies that are degraded. Start serves it on the
// admin address when one is set; Handler serves the same without one.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	s.probes(mux, true)
	return mux
}

// probes registers /healthz, /readyz (detailed: naming the degraded
// failure policies) and, when detailed, /metrics, and problem+json 404s.
func (s *Server) probes(mux *http.ServeMux, detailed bool) {
	if detailed {
		mux.Handle("/metrics", s.api.Only(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}), http.MethodGet, http.MethodHead))
		mux.Handle("/rlconfig", s.api.Only(http.HandlerFunc(s.handleConfigDump), http.MethodGet, http.MethodHead))
	}
	mux.Handle("/healthz", s.api.Only(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	}), http.MethodGet, http.MethodHead))
	mux.Handle("/readyz", s.api.Only(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handleReady(w, r, detailed)
	}), http.MethodGet, http.MethodHead))
	mux.HandleFunc("/", s.api.NotFound)
}

// handleHealthcheck answers envoyproxy/ratelimit's /healthcheck: 200 "OK"
// while the server serves, 500 once it is shutting down (that service
// fails it on SIGTERM). Unlike /readyz it does not look at the store: a
// store outage is answered by the failure policies, and taking every
// replica out of the load balancer for it would not help.
func (s *Server) handleHealthcheck(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.stop:
		w.WriteHeader(http.StatusInternalServerError)
	default:
		_, _ = io.WriteString(w, "OK")
	}
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
