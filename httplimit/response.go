package httplimit

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/ratewarden/ratewarden"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Problem is an RFC 9457 problem details object, as the default handlers
// write it with Content-Type application/problem+json.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RetryAfter repeats Retry-After (seconds) for clients that only read
	// the body; an extension member.
	RetryAfter int64 `json:"retry_after,omitempty"`
	// ViolatedPolicies names the policies whose quota the request exceeded:
	// the "violated-policies" member of the draft's problem types
	// (ProblemTypeQuotaExceeded).
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// MaxInFlight is the cap of WithMaxInFlight, for a request denied for
	// being over it (see DeniedProblem); an extension member.
	MaxInFlight int64 `json:"max-in-flight,omitempty"`
}

// The quota-exceeded problem type of draft-ietf-httpapi-ratelimit-headers,
// section 5.1, with the title the draft gives it. Its extension member
// "violated-policies" is Problem.ViolatedPolicies.
const (
	ProblemTypeQuotaExceeded  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemTitleQuotaExceeded = "Request cannot be satisfied as assigned quota has been exceeded"
)

// WriteProblem writes p as an application/problem+json response with
// status p.Status.
func WriteProblem(w http.ResponseWriter, p Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: only strings, integers and a string slice
		http.Error(w, http.StatusText(p.Status), p.Status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// ProblemDenied is the default DeniedFunc: it writes DeniedProblem(info),
// 429 Too Many Requests with an RFC 9457 body of the draft's
// quota-exceeded problem type (draft-ietf-httpapi-ratelimit-headers
// section 5.1).
func ProblemDenied(w http.ResponseWriter, r *http.Request, info Info) {
	WriteProblem(w, DeniedProblem(info))
}

// DeniedProblem is the problem ProblemDenied writes for info, for
// adapters that write it in their framework's terms: status 429, the
// policies that denied the request in "violated-policies", the binding one
// in the detail, and when to retry, for example
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Request cannot be satisfied as assigned quota has been exceeded",
//	 "status":429,"detail":"Rate limit \"100/1m\" exceeded; retry in 30 s.",
//	 "retry_after":30,"violated-policies":["100/1m"]}
//
// A request denied for being over WithMaxInFlight's cap
// (info.InFlight.Denied(), no policy exceeded) gets a problem of its own,
// with status 429 and the cap in "max-in-flight":
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,
//	 "detail":"Too many requests in flight: at most 4 at once; retry in 15 s.",
//	 "retry_after":15,"max-in-flight":4}
func DeniedProblem(info Info) Problem {
	if info.InFlight.Denied() && len(info.Decision.Results) == 0 {
		retry := inFlightRetry(info.InFlight)
		return Problem{
			Type:        "about:blank",
			Title:       http.StatusText(http.StatusTooManyRequests),
			Status:      http.StatusTooManyRequests,
			Detail:      "Too many requests in flight: at most " + itoa(info.InFlight.Max) + " at once; retry in " + itoa(retry) + " s.",
			RetryAfter:  retry,
			MaxInFlight: info.InFlight.Max,
		}
	}
	b := info.Decision.Binding()
	retry := retryAfterSeconds(b)
	name, found := "", false
	var violated []string
	for i, res := range info.Decision.Results[:min(len(info.Decision.Results), len(info.Policies))] {
		if !res.Allowed {
			violated = append(violated, info.Policies[i].Name)
		}
		if res.Limit == b.Limit && !found {
			name, found = info.Policies[i].Name, true
		}
	}
	if !found {
		name = b.Limit.String()
	}
	return Problem{
		Type:             ProblemTypeQuotaExceeded,
		Title:            ProblemTitleQuotaExceeded,
		Status:           http.StatusTooManyRequests,
		Detail:           "Rate limit " + strconv.Quote(name) + " exceeded; retry in " + itoa(retry) + " s.",
		RetryAfter:       retry,
		ViolatedPolicies: violated,
	}
}

// ProblemError is the default ErrorFunc: it writes ErrorProblem(err).
func ProblemError(w http.ResponseWriter, r *http.Request, err error) {
	WriteProblem(w, ErrorProblem(err))
}

// ErrorProblem is the problem ProblemError writes for err. It maps err to
// a status and a fixed detail, never err's own text, which may describe
// the server: ErrInvalidKey gives 400 (the request does not identify a
// client, e.g. a missing API key header), ErrInvalidCost 400,
// ErrStoreUnavailable and anything else 503.
func ErrorProblem(err error) Problem {
	p := Problem{Type: "about:blank"}
	switch {
	case errors.Is(err, ratewarden.ErrInvalidKey):
		p.Status, p.Detail = http.StatusBadRequest, "The request does not identify a client for rate limiting."
	case errors.Is(err, ratewarden.ErrInvalidCost):
		p.Status, p.Detail = http.StatusBadRequest, "The request's cost is outside what the rate limit can admit."
	default:
		p.Status, p.Detail = http.StatusServiceUnavailable, "Rate limiting is temporarily unavailable."
	}
	p.Title = http.StatusText(p.Status)
	return p
}
