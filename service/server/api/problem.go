package api

import (
	"net/http"

	"github.com/ratewarden/ratewarden/httplimit"
)

// ProblemBase is the prefix of the problem type URIs of the HTTP API's
// application/problem+json answers (RFC 9457): a client tells errors apart
// by type, whose title never changes; detail only ever describes the
// caller's own request, never the server, its store or its errors.
const ProblemBase = "https://ratewarden.dev/problems/"

// The problem types, each with its status and title.
var (
	probInvalid       = probType{"invalid-request", http.StatusBadRequest, "Invalid request"}
	probKeyTooLong    = probType{"key-too-long", http.StatusBadRequest, "Key too long"}
	probInlineOff     = probType{"inline-limits-disabled", http.StatusForbidden, "Inline limits are disabled"}
	probInlineMax     = probType{"inline-limit-above-maximum", http.StatusBadRequest, "Inline limit above the configured maximum"}
	probUnauthorized  = probType{"unauthorized", http.StatusUnauthorized, "Missing or wrong bearer token"}
	probNotFound      = probType{"not-found", http.StatusNotFound, "Not found"}
	probMethod        = probType{"method-not-allowed", http.StatusMethodNotAllowed, "Method not allowed"}
	probMediaType     = probType{"unsupported-media-type", http.StatusUnsupportedMediaType, "Unsupported media type"}
	probTooLarge      = probType{"body-too-large", http.StatusRequestEntityTooLarge, "Request body too large"}
	probUnavailable   = probType{"store-unavailable", http.StatusServiceUnavailable, "Rate limit store unavailable"}
	probCanceled      = probType{"request-canceled", http.StatusServiceUnavailable, "Request canceled"}
	probInternalError = probType{"internal", http.StatusInternalServerError, "Internal error"}
	probInFlight      = probType{"too-many-in-flight", http.StatusTooManyRequests, "Too many in flight"}
	probPermitLost    = probType{"permit-lost", http.StatusGone, "Permit lost"}
	probSettled       = probType{"already-settled", http.StatusConflict, "Reservation already settled"}
)

// probType is one kind of problem.
type probType struct {
	slug   string
	status int
	title  string
}

// apiError is a problem to answer with: its type and a detail about the
// caller's request.
type apiError struct {
	t      probType
	detail string
}

func newProblem(t probType, detail string) *apiError { return &apiError{t: t, detail: detail} }

// write answers with the problem and counts it.
func (s *Service) writeProblem(w http.ResponseWriter, e *apiError) {
	s.m.Problems.WithLabelValues(e.t.slug).Inc()
	httplimit.WriteProblem(w, httplimit.Problem{Type: ProblemBase + e.t.slug, Title: e.t.title, Status: e.t.status, Detail: e.detail})
}
