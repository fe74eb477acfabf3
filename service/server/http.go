package server

import (
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
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
