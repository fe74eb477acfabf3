package rls

import (
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/encoding/protojson"
)

// HandleJSON answers envoyproxy/ratelimit's /json: a RateLimitRequest in
// protobuf JSON, decided as ShouldRateLimit decides it, answered as a
// RateLimitResponse in protobuf JSON with that service's status codes:
// 200 for OK, 429 for OVER_LIMIT; 400 (text) for a body that does not
// decode and for every error ShouldRateLimit returns (an invalid request,
// and a store failure no failure policy answers, which gRPC answers
// UNAVAILABLE).
func (g *Service) HandleJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		textStatus(w, http.StatusBadRequest)
		return
	}
	var req rlspb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		g.log.Debug("/json: request does not decode", "err", err)
		textStatus(w, http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if g.tracer != nil {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	resp, err := g.ShouldRateLimit(ctx, &req)
	if err != nil {
		g.log.Debug("/json: refused", "err", err)
		textStatus(w, http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		textStatus(w, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch resp.GetOverallCode() {
	case rlspb.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case rlspb.RateLimitResponse_UNKNOWN:
		w.WriteHeader(http.StatusInternalServerError)
	}
	_, _ = w.Write(out)
}

// textStatus answers code with its status text, as net/http's Error does.
func textStatus(w http.ResponseWriter, code int) {
	http.Error(w, http.StatusText(code), code)
}
