package server

import (
	"io"
	"net/http"
)

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
