package httplimit

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
)

// setHeaders writes the selected rate limit headers for d. The values are
// built in one buffer and one string, and the header slices share one
// backing array: three allocations for five headers.
func (m *Middleware) setHeaders(h http.Header, ru *rule, d ratewarden.Decision) {
	if m.headers&(DraftHeaders|XRateLimitHeaders) == 0 {
		return
	}
	var arr [192]byte
	buf := arr[:0]
	var ends [4]int
	if m.headers&DraftHeaders != 0 {
		for i, res := range d.Results {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = append(buf, ru.quoted[i]...)
			buf = append(buf, ";r="...)
			buf = strconv.AppendInt(buf, res.Remaining, 10)
			buf = append(buf, ";t="...)
			buf = strconv.AppendInt(buf, ceilSeconds(res.ResetAfter), 10)
		}
	}
	ends[0] = len(buf)
	if m.headers&XRateLimitHeaders != 0 {
		b := d.Binding()
		reset := ceilSeconds(b.ResetAfter)
		if m.headers&XRateLimitResetUnix != 0 {
			reset = m.now().Add(time.Duration(reset) * time.Second).Unix()
		}
		buf = strconv.AppendInt(buf, b.Limit.Capacity(), 10)
		ends[1] = len(buf)
		buf = strconv.AppendInt(buf, b.Remaining, 10)
		ends[2] = len(buf)
		buf = strconv.AppendInt(buf, reset, 10)
		ends[3] = len(buf)
	}
	s := string(buf)
	vals := make([]string, 5)
	if m.headers&DraftHeaders != 0 {
		vals[0], vals[1] = ru.policyValue, s[:ends[0]]
		h["Ratelimit-Policy"] = vals[0:1:1]
		h["Ratelimit"] = vals[1:2:2]
	}
	if m.headers&XRateLimitHeaders != 0 {
		vals[2], vals[3], vals[4] = s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]]
		h["X-Ratelimit-Limit"] = vals[2:3:3]
		h["X-Ratelimit-Remaining"] = vals[3:4:4]
		h["X-Ratelimit-Reset"] = vals[4:5:5]
	}
}

// ceilSeconds is d in whole seconds, rounded up: a client that waits that
// long is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is the Retry-After value for a denial: at least 1, as
// "0" would invite an immediate retry that is still denied.
func retryAfterSeconds(b ratewarden.Result) int64 {
	return max(ceilSeconds(b.RetryAfter), 1)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// sfString formats s as a Structured Field String (RFC 9651 section
// 3.3.3); s is printable ASCII (validated when the rule is compiled).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

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
}

// WriteProblem writes p as an application/problem+json response with
// status p.Status.
func WriteProblem(w http.ResponseWriter, p Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: only strings and integers
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

// ProblemDenied is the default DeniedFunc: 429 Too Many Requests with an
// RFC 9457 body naming the binding policy and when to retry, for example
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,
//	 "detail":"Rate limit \"100/1m\" exceeded; retry in 30 s.","retry_after":30}
func ProblemDenied(w http.ResponseWriter, r *http.Request, info Info) {
	b := info.Decision.Binding()
	retry := retryAfterSeconds(b)
	name := b.Limit.String()
	for i, p := range info.Policies {
		if i < len(info.Decision.Results) && info.Decision.Results[i].Limit == b.Limit {
			name = p.Name
			break
		}
	}
	WriteProblem(w, Problem{
		Type:       "about:blank",
		Title:      http.StatusText(http.StatusTooManyRequests),
		Status:     http.StatusTooManyRequests,
		Detail:     "Rate limit " + strconv.Quote(name) + " exceeded; retry in " + itoa(retry) + " s.",
		RetryAfter: retry,
	})
}

// ProblemError is the default ErrorFunc. It maps err to a status and a
// fixed detail, never err's own text, which may describe the server:
// ErrInvalidKey gives 400 (the request does not identify a client, e.g. a
// missing API key header), ErrInvalidCost 400, ErrStoreUnavailable and
// anything else 503.
func ProblemError(w http.ResponseWriter, r *http.Request, err error) {
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
	WriteProblem(w, p)
}
