package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
)

// CheckRequest is the body of POST /v1/check and /v1/peek.
type CheckRequest struct {
	// Key identifies who is limited (a user, an API key, an IP address).
	Key string `json:"key"`
	// Policy names a policy of the config; or give Limit.
	Policy string `json:"policy,omitempty"`
	// Limit is an inline limit in ParseLimit's grammar ("100/1m").
	Limit string `json:"limit,omitempty"`
	// Cost is the number of units to take; default 1, 0 reports the state.
	Cost *int64 `json:"cost,omitempty"`
}

// ResetRequest is the body of POST /v1/reset.
type ResetRequest struct {
	Key    string `json:"key"`
	Policy string `json:"policy,omitempty"`
	Limit  string `json:"limit,omitempty"`
}

// Decision is the body of a 200 answer from /v1/check and /v1/peek.
type Decision struct {
	// Allowed: the request may proceed. For a shadow policy it is always
	// true, and OverLimit tells what enforcing would have said.
	Allowed   bool   `json:"allowed"`
	OverLimit bool   `json:"over_limit"`
	Key       string `json:"key"`
	Policy    string `json:"policy,omitempty"`
	Limit     string `json:"limit"`
	Cost      int64  `json:"cost"`
	Remaining int64  `json:"remaining"`
	// RetryAfterMS and ResetAfterMS are milliseconds, rounded up.
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	// Source is who decided: store, or a failure policy (fail_open,
	// fail_closed, local_fallback) when the shared store could not.
	Source   string `json:"source"`
	Degraded bool   `json:"degraded"`
	Shadow   bool   `json:"shadow,omitempty"`
}

// Handler returns the HTTP handler: the /v1 API, /metrics, /healthz and
// /readyz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", s.api(func(w http.ResponseWriter, r *http.Request) { s.handleCheck(w, r, false) }))
	mux.Handle("POST /v1/peek", s.api(func(w http.ResponseWriter, r *http.Request) { s.handleCheck(w, r, true) }))
	mux.Handle("POST /v1/reset", s.api(s.handleReset))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := s.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// api wraps a /v1 handler with the bearer token check and the body limit.
func (s *Server) api(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ratewarden"`)
				problem(w, http.StatusUnauthorized, "missing or wrong bearer token (Authorization: Bearer <token>)")
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		h(w, r)
	})
}

func problem(w http.ResponseWriter, status int, detail string) {
	httplimit.WriteProblem(w, httplimit.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// decodeBody reads exactly one JSON object into v (a pointer to a struct),
// refusing unknown fields. Field names must match exactly: encoding/json
// alone would take {"KEY": ...} for "key". It writes the error answer
// itself and reports false on failure.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) == nil { // else the decoder below says what is wrong
			if name, want := unknownField(fields, v); name != "" {
				msg := fmt.Sprintf("unknown field %q", name)
				if want != "" {
					msg += fmt.Sprintf(" (field names are case-sensitive: %q)", want)
				}
				problem(w, http.StatusBadRequest, msg)
				return false
			}
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
		if err == nil {
			if _, extra := dec.Token(); extra != io.EOF {
				err = errors.New("trailing data after the JSON object")
			}
		}
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &tooBig):
		problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
	case errors.Is(err, io.EOF):
		problem(w, http.StatusBadRequest, "empty body: want a JSON object")
	case errors.As(err, &typeErr):
		problem(w, http.StatusBadRequest, fmt.Sprintf("field %q: want %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value))
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		problem(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
	default:
		// unknown fields ("json: unknown field \"x\""), trailing data
		problem(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "json: "))
	}
	return false
}

// unknownField returns the first name, in sorted order, of fields that is
// not exactly the JSON name of a field of the struct v points to, and the
// field it differs from only in case, if any.
func unknownField(fields map[string]json.RawMessage, v any) (name, want string) {
	t := reflect.TypeOf(v).Elem()
	known := map[string]bool{}
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if tag != "" && tag != "-" {
			known[tag] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if known[k] {
			continue
		}
		for kn := range known {
			if strings.EqualFold(k, kn) {
				return k, kn
			}
		}
		return k, ""
	}
	return "", ""
}

// target is what a request limits: the store key, limit and policy.
type target struct {
	key    string // the store key (namespaced)
	limit  ratewarden.Limit
	policy string // policy name, or "inline"
	fp     config.FailurePolicy
	shadow bool
}

// resolve turns key + policy|limit into a target, or an error message for
// a 400.
func (s *Server) resolve(key, policy, limit string) (target, string) {
	switch {
	case key == "":
		return target{}, `field "key" is required`
	case policy != "" && limit != "":
		return target{}, `give "policy" or "limit", not both`
	case policy == "" && limit == "":
		return target{}, `field "policy" (a configured policy name) or "limit" (e.g. "100/1m") is required`
	}
	sn := s.snap.Load()
	if policy != "" {
		p := sn.cfg.Policies[policy]
		if p == nil {
			return target{}, fmt.Sprintf("unknown policy %q", policy)
		}
		// Policies count apart from each other and from inline limits.
		return target{
			key:    "policy/" + url.PathEscape(policy) + "/" + key,
			limit:  p.Limit,
			policy: policy,
			fp:     s.failure(sn.cfg, p.Failure),
			shadow: p.Shadow,
		}, ""
	}
	lim, err := ratewarden.ParseLimit(limit)
	if err != nil {
		return target{}, fmt.Sprintf("field %q: %v", "limit", err)
	}
	return target{key: "limit/" + key, limit: lim, policy: "inline", fp: s.failure(sn.cfg)}, ""
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request, peek bool) {
	var in CheckRequest
	if !decodeBody(w, r, &in) {
		return
	}
	t, msg := s.resolve(in.Key, in.Policy, in.Limit)
	if msg != "" {
		problem(w, http.StatusBadRequest, msg)
		return
	}
	cost := int64(1)
	if in.Cost != nil {
		cost = *in.Cost
	}
	res, err := s.checkOne(r.Context(), t, cost, peek)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !peek {
		s.m.decision("http", "", t.policy, res, t.shadow)
	}
	d := Decision{
		Allowed:      res.Allowed || t.shadow,
		OverLimit:    !res.Allowed,
		Key:          in.Key,
		Policy:       in.Policy,
		Limit:        t.limit.String(),
		Cost:         cost,
		Remaining:    res.Remaining,
		RetryAfterMS: ceilMillis(res.RetryAfter),
		ResetAfterMS: ceilMillis(res.ResetAfter),
		Source:       res.Source.String(),
		Degraded:     res.Degraded(),
		Shadow:       t.shadow,
	}
	name := t.policy
	if name == "inline" {
		name = t.limit.String()
	}
	httplimit.NewRenderer(httplimit.DraftHeaders|httplimit.XRateLimitHeaders, httplimit.Policy{Name: name, Limit: t.limit}).
		Set(w.Header(), ratewarden.Decision{Allowed: d.Allowed, Results: []ratewarden.Result{res}}, !d.Allowed)
	writeJSON(w, http.StatusOK, d)
}

// checkOne checks, or peeks, cost units of t through the Limiter of its
// failure policy: one store call.
func (s *Server) checkOne(ctx context.Context, t target, cost int64, peek bool) (ratewarden.Result, error) {
	lim, err := s.limiter(t.fp)
	if err != nil {
		return ratewarden.Result{}, err
	}
	if !peek {
		return lim.AllowN(ctx, t.key, t.limit, cost)
	}
	d, err := lim.PeekKeys(ctx, ratewarden.KeyCheck{Key: t.key, Limits: []ratewarden.Limit{t.limit}, Cost: cost})
	if err != nil {
		return ratewarden.Result{}, err
	}
	return d.Checks[0].Results[0], nil
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	var in ResetRequest
	if !decodeBody(w, r, &in) {
		return
	}
	t, msg := s.resolve(in.Key, in.Policy, in.Limit)
	if msg != "" {
		problem(w, http.StatusBadRequest, msg)
		return
	}
	lim, err := s.limiter(t.fp)
	if err == nil {
		err = lim.Reset(r.Context(), t.key, t.limit)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("reset", "policy", t.policy, "limit", t.limit.String())
	writeJSON(w, http.StatusOK, map[string]any{"key": in.Key, "policy": in.Policy, "limit": t.limit.String(), "reset": true})
}

// writeError answers a failed Limiter call, sorted by ratewarden.Classify.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	switch ratewarden.Classify(r.Context(), err) {
	case ratewarden.CallerCanceled:
		// The client went away: not a store failure, and nobody reads this.
		s.log.Debug("request canceled by the client", "err", err)
		problem(w, http.StatusServiceUnavailable, "request canceled: "+err.Error())
	case ratewarden.StoreUnavailable:
		s.log.Warn("store unavailable", "err", err)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "the rate limit store could not decide: "+err.Error())
	default:
		problem(w, http.StatusBadRequest, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding the answer failed")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
