package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// CheckRequest is the body of POST /v1/check and /v1/peek.
type CheckRequest struct {
	// Key identifies who is limited (a user, an API key, an IP address).
	Key string `json:"key"`
	// Policy names a policy of the config; or give Limit.
	Policy string `json:"policy,omitempty"`
	// Limit is an inline limit in ParseLimit's grammar ("100/1m"), taken
	// only when the operator turned inline limits on (--inline-limits or
	// the config's inline_limits), within their maxima.
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

// Service is the HTTP API: its handlers (Register) decide through the
// Limiters, on the policies of the configuration in force (SetConfig,
// before it serves).
type Service struct {
	log            *slog.Logger
	m              *telemetry.Metrics
	lims           *decide.Limiters
	token          string
	maxBody        int64
	maxKey         int
	inline         config.InlineLimits
	defaultFailure fallback.Policy
	secrets        [][]byte // sign reservations (the first) and check them

	plan atomic.Pointer[plan] // the configuration in force, resolved
}

// Deps are what a Service decides with. The server hands them over
// checked (its options validate them); New takes them as they are.
type Deps struct {
	Log      *slog.Logger
	Metrics  *telemetry.Metrics
	Limiters *decide.Limiters
	// Token, when not empty, is the bearer token the API requires.
	Token string
	// MaxBody bounds a request body (413 beyond); MaxKey a caller key.
	MaxBody int64
	MaxKey  int
	// Inline is the inline limits setting of the server, which a
	// config's inline_limits overrides.
	Inline config.InlineLimits
	// DefaultFailure is the failure policy of policies whose config
	// names none.
	DefaultFailure fallback.Policy
	// Secrets sign reservations (the first) and check them (every one),
	// each at least MinSecretBytes long; nil: a random secret of the
	// process, so a reservation settles only where it was made.
	Secrets [][]byte
}

// New returns a Service on d.
func New(d Deps) *Service {
	s := &Service{log: d.Log, m: d.Metrics, lims: d.Limiters, token: d.Token, maxBody: d.MaxBody, maxKey: d.MaxKey,
		inline: d.Inline, defaultFailure: d.DefaultFailure, secrets: d.Secrets}
	if s.secrets == nil {
		s.secrets = processSecret()
	}
	return s
}

// SetConfig puts cfg's policies in force: requests already deciding
// finish on the configuration they started with.
func (s *Service) SetConfig(cfg *config.Config) { s.plan.Store(s.newPlan(cfg)) }

// Register registers the API's endpoints on mux: /v1/check, /v1/peek,
// /v1/reset, /v1/reserve, /v1/settle, /v1/acquire, /v1/release and
// /v1/extend, POST only.
func (s *Service) Register(mux *http.ServeMux) {
	mux.Handle("/v1/check", s.Only(s.Guard(func(w http.ResponseWriter, r *http.Request) { s.handleCheck(w, r, false) }), http.MethodPost))
	mux.Handle("/v1/peek", s.Only(s.Guard(func(w http.ResponseWriter, r *http.Request) { s.handleCheck(w, r, true) }), http.MethodPost))
	mux.Handle("/v1/reset", s.Only(s.Guard(s.handleReset), http.MethodPost))
	mux.Handle("/v1/reserve", s.Only(s.Guard(s.handleReserve), http.MethodPost))
	mux.Handle("/v1/settle", s.Only(s.Guard(s.handleSettle), http.MethodPost))
	mux.Handle("/v1/acquire", s.Only(s.Guard(s.handleAcquire), http.MethodPost))
	mux.Handle("/v1/release", s.Only(s.Guard(s.handleRelease), http.MethodPost))
	mux.Handle("/v1/extend", s.Only(s.Guard(s.handleExtend), http.MethodPost))
}

// Only answers methods other than those given with a 405 problem.
func (s *Service) Only(h http.Handler, methods ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			s.writeProblem(w, newProblem(probMethod, "allowed: "+strings.Join(methods, ", ")))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// NotFound answers a 404 problem: no such endpoint.
func (s *Service) NotFound(w http.ResponseWriter, _ *http.Request) {
	s.writeProblem(w, newProblem(probNotFound, "no such endpoint"))
}

// Guard wraps a handler of the API with the bearer token check and the
// body limit (Deps.Token and Deps.MaxBody): the /v1 endpoints', and the
// server's /json.
func (s *Service) Guard(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratewarden"`)
			s.writeProblem(w, newProblem(probUnauthorized, "missing or wrong bearer token (Authorization: Bearer <token>)"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		h(w, r)
	})
}

// authorized reports whether the request carries the API token: the
// auth scheme is case-insensitive (RFC 9110 section 11.1), the token is
// compared in constant time.
func (s *Service) authorized(r *http.Request) bool {
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	cred = strings.TrimLeft(cred, " ")
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(cred), []byte(s.token)) == 1
}

// newStrictDecoder decodes body refusing unknown fields.
func newStrictDecoder(body []byte) *json.Decoder {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec
}

// typeProblem says what a field wants in JSON terms, never Go's.
func typeProblem(e *json.UnmarshalTypeError) string {
	if e.Field == "" {
		return "want a JSON object, got JSON " + e.Value
	}
	want := "a string"
	switch e.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "a whole number"
	case reflect.Bool:
		want = "true or false"
	}
	return fmt.Sprintf("field %q: want %s, got JSON %s", e.Field, want, e.Value)
}

// jsonProblem is the answer to a decoding error.
func jsonProblem(err error) *apiError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return newProblem(probInvalid, "empty body: want a JSON object")
	case errors.As(err, &typeErr):
		return newProblem(probInvalid, typeProblem(typeErr))
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return newProblem(probInvalid, "invalid JSON: "+err.Error())
	default:
		// unknown fields ("json: unknown field \"x\""), trailing data
		return newProblem(probInvalid, strings.TrimPrefix(err.Error(), "json: "))
	}
}

// checkMembers reports a member name of the top-level object in body that
// is given twice or is not exactly the JSON name of a field of the struct
// v points to (saying which field it differs from only in case). Syntax
// errors are left to the decoder.
func checkMembers(body []byte, v any) *apiError {
	known := jsonNames(v)
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		name, isStr := tok.(string)
		if err != nil || !isStr {
			return nil
		}
		if seen[name] {
			return newProblem(probInvalid, fmt.Sprintf("member %q given twice", name))
		}
		seen[name] = true
		if !slices.Contains(known, name) {
			msg := fmt.Sprintf("unknown field %q", name)
			for _, kn := range known {
				if strings.EqualFold(name, kn) {
					msg += fmt.Sprintf(" (field names are case-sensitive: %q)", kn)
				}
			}
			return newProblem(probInvalid, msg)
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return nil
}

// jsonNames lists the JSON names of the fields of the struct v points to.
func jsonNames(v any) []string {
	t := reflect.TypeOf(v).Elem()
	var names []string
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if tag != "" && tag != "-" {
			names = append(names, tag)
		}
	}
	return names
}

// checkStrings refuses a string field holding U+FFFD: the body is valid
// UTF-8, so it came from an escaped lone surrogate ("\ud800"), which
// encoding/json replaces, or was sent as is; either way two distinct keys
// could collapse into one.
func checkStrings(v any) *apiError {
	rv := reflect.ValueOf(v).Elem()
	t := rv.Type()
	for i := range t.NumField() {
		f := rv.Field(i)
		if f.Kind() == reflect.String && strings.ContainsRune(f.String(), utf8.RuneError) {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			return newProblem(probInvalid, fmt.Sprintf("field %q: invalid UTF-8 (a lone surrogate escape or U+FFFD)", tag))
		}
	}
	return nil
}

// target is what a request limits: the store key, limit and policy, and
// how its answer is written and counted.
type target struct {
	key      string // the store key (namespaced)
	limit    ratewarden.Limit
	limitStr string // limit.String()
	policy   string // policy name, or "inline"
	fp       fallback.Policy
	shadow   bool
	renderer *httplimit.Renderer // the rate limit headers
	series   *telemetry.Series   // ratewarden_decisions_total of the policy
}

// resolve turns key + policy|limit into a target, or a problem. cost is
// checked against the inline maxima (0 for a reset).
func (s *Service) resolve(key, policy, limit string, cost int64) (target, *apiError) {
	switch {
	case key == "":
		return target{}, newProblem(probInvalid, `field "key" is required`)
	case len(key) > s.maxKey:
		return target{}, newProblem(probKeyTooLong, fmt.Sprintf(`field "key" is %d bytes; the cap is %d bytes (--max-key-bytes)`, len(key), s.maxKey))
	case policy != "" && limit != "":
		return target{}, newProblem(probInvalid, `give "policy" or "limit", not both`)
	case policy == "" && limit == "":
		return target{}, newProblem(probInvalid, `field "policy" (a configured policy name) or "limit" (e.g. "100/1m") is required`)
	}
	sn := s.plan.Load()
	if policy != "" {
		pp := sn.policies[policy]
		if pp == nil {
			return target{}, newProblem(probInvalid, fmt.Sprintf("unknown policy %q", policy))
		}
		if pp.p.Concurrency != nil {
			return target{}, newProblem(probInvalid, fmt.Sprintf("policy %q is a concurrency limit (max_in_flight): use /v1/acquire", policy))
		}
		// Policies count apart from each other and from inline limits.
		return target{
			key:      pp.keyPrefix + key,
			limit:    pp.p.Limit,
			limitStr: pp.limitStr,
			policy:   policy,
			fp:       pp.fp,
			shadow:   pp.p.Shadow,
			renderer: pp.renderer,
			series:   &pp.series,
		}, nil
	}
	il := s.inlineLimits(sn.cfg)
	if !il.Enabled {
		return target{}, newProblem(probInlineOff, `inline limits ("limit") are off: name a configured "policy", or have the operator enable them (--inline-limits, $RATEWARDEN_INLINE_LIMITS, or inline_limits.enabled in the config)`)
	}
	lim, err := ratewarden.ParseLimit(limit)
	if err != nil {
		return target{}, newProblem(probInvalid, fmt.Sprintf("field %q: %v", "limit", err))
	}
	if err := il.Check(lim, cost); err != nil {
		return target{}, newProblem(probInlineMax, strings.TrimPrefix(strings.TrimSuffix(err.Error(), ": "+ratewarden.ErrInvalidLimit.Error()), "config: "))
	}
	name := lim.String()
	return target{
		key:      inlineKeyPrefix + key,
		limit:    lim,
		limitStr: name,
		policy:   "inline",
		fp:       decide.Failure(sn.cfg, s.defaultFailure),
		renderer: httplimit.NewRenderer(decide.DraftSet, httplimit.Policy{Name: name, Limit: lim}),
		series:   &sn.inline,
	}, nil
}

// inlineLimits is the inline limits setting in force: cfg's when it sets
// one (enabled when Deps.Inline or cfg enables it), else Deps.Inline,
// with defaults for the maxima.
func (s *Service) inlineLimits(cfg *config.Config) config.InlineLimits {
	il := s.inline
	if c := cfg.Inline; c != nil {
		on := il.Enabled || c.Enabled
		il = *c
		il.Enabled = on
	}
	return il.WithDefaults()
}

func (s *Service) handleCheck(w http.ResponseWriter, r *http.Request, peek bool) {
	var in CheckRequest
	if e := decodeBody(r, &in); e != nil {
		s.writeProblem(w, e)
		return
	}
	cost := int64(1)
	if in.Cost != nil {
		cost = *in.Cost
	}
	t, e := s.resolve(in.Key, in.Policy, in.Limit, cost)
	if e != nil {
		s.writeProblem(w, e)
		return
	}
	res, err := s.checkOne(r.Context(), t, cost, peek)
	if err != nil {
		s.writeError(w, r, err, in.Key)
		return
	}
	if !peek {
		t.series.Decision(s.m, &res, t.shadow)
	}
	d := t.answer(w.Header(), in.Key, in.Policy, cost, &res)
	writeJSON(w, http.StatusOK, &d)
}

// answer is the Decision on cost units of t for key (policy as the caller
// named it) that res decided, as /v1/check and /v1/reserve answer it; it
// sets the rate limit headers on h.
func (t *target) answer(h http.Header, key, policy string, cost int64, res *ratewarden.Result) Decision {
	d := Decision{
		Allowed:      res.Allowed || t.shadow,
		OverLimit:    !res.Allowed,
		Key:          key,
		Policy:       policy,
		Limit:        t.limitStr,
		Cost:         cost,
		Remaining:    res.Remaining,
		RetryAfterMS: ceilMillis(res.RetryAfter),
		ResetAfterMS: ceilMillis(res.ResetAfter),
		Source:       res.Source.String(),
		Degraded:     res.Degraded(),
		Shadow:       t.shadow,
	}
	results := [1]ratewarden.Result{*res}
	t.renderer.Set(h, ratewarden.Decision{Allowed: d.Allowed, Results: results[:]}, !d.Allowed)
	return d
}

// checkOne checks, or peeks, cost units of t through the Limiter of its
// failure policy: one store call.
func (s *Service) checkOne(ctx context.Context, t target, cost int64, peek bool) (ratewarden.Result, error) {
	lim, err := s.lims.For(t.fp)
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

func (s *Service) handleReset(w http.ResponseWriter, r *http.Request) {
	var in ResetRequest
	if e := decodeBody(r, &in); e != nil {
		s.writeProblem(w, e)
		return
	}
	t, e := s.resolve(in.Key, in.Policy, in.Limit, 0)
	if e != nil {
		s.writeProblem(w, e)
		return
	}
	lim, err := s.lims.For(t.fp)
	if err == nil {
		err = lim.Reset(r.Context(), t.key, t.limit)
	}
	if err != nil {
		s.writeError(w, r, err, in.Key)
		return
	}
	s.log.Info("reset", "policy", t.policy, "limit", t.limit.String(), "key_hash", decide.KeyHash(in.Key))
	writeJSON(w, http.StatusOK, map[string]any{"key": in.Key, "policy": in.Policy, "limit": t.limit.String(), "reset": true})
}

// writeError answers a failed Limiter call, sorted by ratewarden.Classify.
// A store failure gets a fixed detail: its error, which may name
// addresses, goes to the log (the key hashed) and the store metrics.
func (s *Service) writeError(w http.ResponseWriter, r *http.Request, err error, key string) {
	msg := decide.Redact(err.Error(), key)
	switch ratewarden.Classify(r.Context(), err) {
	case ratewarden.CallerCanceled:
		// The client went away: not a store failure, and nobody reads this.
		s.log.Debug("request canceled by the client", "err", msg, "key_hash", decide.KeyHash(key))
		s.writeProblem(w, newProblem(probCanceled, "the request was canceled before the store decided"))
	case ratewarden.StoreUnavailable, ratewarden.KeyState:
		s.log.Warn("store unavailable", "err", msg, "key_hash", decide.KeyHash(key))
		w.Header().Set("Retry-After", "1")
		s.writeProblem(w, newProblem(probUnavailable, "the rate limit store could not decide; retry later"))
	default:
		// The caller's input (a cost the limit cannot take, ...): the
		// message describes the request, never the server.
		s.writeProblem(w, newProblem(probInvalid, strings.TrimPrefix(msg, "ratewarden: ")))
	}
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
