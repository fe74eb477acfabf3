package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// AcquireRequest is the body of POST /v1/acquire.
type AcquireRequest struct {
	// Key identifies what is limited (a tenant, a user).
	Key string `json:"key"`
	// Policy names a concurrency policy of the config (max_in_flight and
	// ttl): callers never choose the limit or the store.
	Policy string `json:"policy"`
}

// ReleaseRequest is the body of POST /v1/release.
type ReleaseRequest struct {
	// Permit is the permit /v1/acquire answered with.
	Permit string `json:"permit"`
}

// ExtendRequest is the body of POST /v1/extend.
type ExtendRequest struct {
	Permit string `json:"permit"`
	// TTLMS is how long from now the permit is to be held, in
	// milliseconds: 1 to the policy's ttl, which is the default.
	TTLMS *int64 `json:"ttl_ms,omitempty"`
}

// Acquisition is the body of /v1/acquire's answers: 200 when a permit was
// acquired; 429 when not, as a problem (its type, title, status and
// detail) with these members besides.
type Acquisition struct {
	Acquired bool `json:"acquired"`
	// Permit is what /v1/release and /v1/extend take; empty when not
	// acquired.
	Permit string `json:"permit,omitempty"`
	Key    string `json:"key"`
	Policy string `json:"policy"`
	// Held is the number of the key's permits held after the call, this
	// one included; Max the policy's max_in_flight.
	Held int64 `json:"held"`
	Max  int64 `json:"max"`
	// TTLMS is how long the permit is held unless released or extended.
	TTLMS int64 `json:"ttl_ms"`
	// RetryAfterMS is 0 when acquired; otherwise the time until the
	// soonest-expiring permit of the key expires (a release frees one
	// sooner), rounded up.
	RetryAfterMS int64 `json:"retry_after_ms"`
	// Source is who decided: store, or the failure policy that answered
	// when the shared store could not.
	Source   string `json:"source"`
	Degraded bool   `json:"degraded"`
}

// acquireDenied is /v1/acquire's 429 body: a problem whose extension
// members are the Acquisition's.
type acquireDenied struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Acquisition
}

// PermitAnswer is the body of a 200 answer from /v1/release and
// /v1/extend.
type PermitAnswer struct {
	Key    string `json:"key"`
	Policy string `json:"policy"`
	// Released (release): a held permit was given back. False when it
	// was not held: it expired, was released already, or was granted by
	// fail_open and so held nowhere.
	Released *bool `json:"released,omitempty"`
	// Extended (extend) is always true: a permit that is no longer held
	// is a 410.
	Extended *bool `json:"extended,omitempty"`
	// TTLMS (extend): the permit is now held this long from now.
	TTLMS int64 `json:"ttl_ms,omitempty"`
}

// concurrencyPolicy resolves key and policy for /v1/acquire.
func (s *Service) concurrencyPolicy(key, policy string) (*policyPlan, *apiError) {
	switch {
	case key == "":
		return nil, newProblem(probInvalid, `field "key" is required`)
	case len(key) > s.maxKey:
		return nil, newProblem(probKeyTooLong, fmt.Sprintf(`field "key" is %d bytes; the cap is %d bytes (--max-key-bytes)`, len(key), s.maxKey))
	case policy == "":
		return nil, newProblem(probInvalid, `field "policy" (a configured concurrency policy: max_in_flight and ttl) is required`)
	}
	pp := s.plan.Load().policies[policy]
	switch {
	case pp == nil:
		return nil, newProblem(probInvalid, fmt.Sprintf("unknown policy %q", policy))
	case pp.p.Concurrency == nil:
		return nil, newProblem(probInvalid, fmt.Sprintf("policy %q is a rate limit: use /v1/check or /v1/reserve; /v1/acquire takes a concurrency policy (max_in_flight and ttl)", policy))
	}
	return pp, nil
}

// permitRequest is a body that names a permit: /v1/release's and
// /v1/extend's.
type permitRequest interface{ permit() string }

func (in *ReleaseRequest) permit() string { return in.Permit }
func (in *ExtendRequest) permit() string  { return in.Permit }

// openPermit decodes a /v1/release or /v1/extend body into in and reads
// the permit it names (permitPolicy); false when it answered with a
// problem.
func (s *Service) openPermit(w http.ResponseWriter, r *http.Request, in permitRequest) (permitToken, *policyPlan, bool) {
	e := decodeBody(r, in)
	var tok permitToken
	var pp *policyPlan
	if e == nil {
		tok, pp, e = s.permitPolicy(in.permit())
	}
	if e != nil {
		s.writeProblem(w, e)
		return permitToken{}, nil, false
	}
	return tok, pp, true
}

// permitPolicy reads a permit and resolves its policy, which must still be
// a concurrency policy of the configuration in force.
func (s *Service) permitPolicy(permit string) (permitToken, *policyPlan, *apiError) {
	if permit == "" {
		return permitToken{}, nil, newProblem(probInvalid, `field "permit" is required`)
	}
	tok, err := decodePermit(permit)
	if err != nil {
		return permitToken{}, nil, newProblem(probInvalid, `field "permit": not a permit of this service (send it back as /v1/acquire gave it)`)
	}
	pp := s.plan.Load().policies[tok.policy]
	if pp == nil || pp.p.Concurrency == nil {
		return permitToken{}, nil, newProblem(probInvalid, fmt.Sprintf(`field "permit": its policy %q is no longer a configured concurrency policy; the permit ends with its ttl`, tok.policy))
	}
	return tok, pp, nil
}

// handleAcquire answers POST /v1/acquire: Limiter.Acquire under the
// policy's failure policy, the permit's holder handed to the caller so
// that any replica can end the permit (Limiter.PermitOf).
func (s *Service) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var in AcquireRequest
	if e := decodeBody(r, &in); e != nil {
		s.writeProblem(w, e)
		return
	}
	pp, e := s.concurrencyPolicy(in.Key, in.Policy)
	if e != nil {
		s.writeProblem(w, e)
		return
	}
	c := pp.p.Concurrency
	lim, err := s.lims.For(pp.fp)
	var p *ratewarden.Permit
	if err == nil {
		p, err = lim.Acquire(r.Context(), pp.keyPrefix+in.Key, c.MaxInFlight, c.TTL)
	}
	if err != nil {
		s.writeError(w, r, err, in.Key)
		return
	}
	pp.series.Decision(s.m, &ratewarden.Result{Allowed: p.Acquired, Source: p.Source}, false)
	a := Acquisition{
		Acquired:     p.Acquired,
		Key:          in.Key,
		Policy:       in.Policy,
		Held:         p.Held,
		Max:          c.MaxInFlight,
		TTLMS:        ceilMillis(c.TTL),
		RetryAfterMS: ceilMillis(p.RetryAfter),
		Source:       p.Source.String(),
		Degraded:     p.Degraded(),
	}
	if p.Acquired {
		tok := permitToken{holder: p.Holder(), nowhere: p.Source == ratewarden.SourceFailOpen, policy: in.Policy, key: in.Key}
		a.Permit = tok.encode()
		writeJSON(w, http.StatusOK, &a)
		return
	}
	retry := max((p.RetryAfter+999_999_999)/1_000_000_000, 1) // whole seconds, rounded up, at least 1
	w.Header().Set("Retry-After", strconv.FormatInt(int64(retry), 10))
	body := acquireDenied{
		Type:        ProblemBase + probInFlight.slug,
		Title:       probInFlight.title,
		Status:      probInFlight.status,
		Detail:      fmt.Sprintf("%d of %d permits of this key are held; retry in %d ms", p.Held, c.MaxInFlight, a.RetryAfterMS),
		Acquisition: a,
	}
	if p.Source == ratewarden.SourceFailClosed {
		body.Detail = fmt.Sprintf("the shared store cannot decide and policy %q fails closed; retry in %d ms", in.Policy, a.RetryAfterMS)
	}
	writeProblemJSON(w, body.Status, &body)
}

// endPermit calls end (Release or Extend) on the permit tok names, under
// the Limiter of its policy's failure policy; a permit fail_open granted
// is held nowhere, and there is nothing to call.
func (s *Service) endPermit(tok permitToken, pp *policyPlan, end func(*ratewarden.Permit) error) error {
	if tok.nowhere {
		return nil
	}
	lim, err := s.lims.For(pp.fp)
	if err != nil {
		return err
	}
	p, err := lim.PermitOf(pp.keyPrefix+tok.key, tok.holder)
	if err != nil {
		return err
	}
	return end(p)
}

// handleRelease answers POST /v1/release: 200 {"released": bool}.
func (s *Service) handleRelease(w http.ResponseWriter, r *http.Request) {
	var in ReleaseRequest
	tok, pp, ok := s.openPermit(w, r, &in)
	if !ok {
		return
	}
	// released stays false when the store is not asked (a fail_open permit).
	ctx, released := telemetry.WithPermitOutcome(r.Context())
	if err := s.endPermit(tok, pp, func(p *ratewarden.Permit) error { return p.Release(ctx) }); err != nil {
		s.writeError(w, r, err, tok.key)
		return
	}
	result := "released"
	if !*released {
		result = "not_held"
	}
	s.m.Permits.WithLabelValues(tok.policy, "release", result).Inc()
	writeJSON(w, http.StatusOK, &PermitAnswer{Key: tok.key, Policy: tok.policy, Released: released})
}

// handleExtend answers POST /v1/extend: 200 when the permit is held for
// ttl_ms from now, 410 permit-lost when it was no longer held.
func (s *Service) handleExtend(w http.ResponseWriter, r *http.Request) {
	var in ExtendRequest
	tok, pp, ok := s.openPermit(w, r, &in)
	if !ok {
		return
	}
	ttl := pp.p.Concurrency.TTL
	if in.TTLMS != nil {
		maxMS := ttl.Milliseconds()
		if *in.TTLMS < 1 || *in.TTLMS > maxMS {
			s.writeProblem(w, newProblem(probInvalid, fmt.Sprintf(`field "ttl_ms" must be between 1 and %d (policy %q's ttl), got %d`, maxMS, tok.policy, *in.TTLMS)))
			return
		}
		ttl = time.Duration(*in.TTLMS) * time.Millisecond
	}
	err := s.endPermit(tok, pp, func(p *ratewarden.Permit) error { return p.Extend(r.Context(), ttl) })
	switch {
	case errors.Is(err, ratewarden.ErrPermitLost):
		s.m.Permits.WithLabelValues(tok.policy, "extend", "lost").Inc()
		s.writeProblem(w, newProblem(probPermitLost, "the permit expired (or was released) before it was extended; the work it guarded is no longer counted: acquire a new one"))
		return
	case err != nil:
		s.writeError(w, r, err, tok.key)
		return
	}
	s.m.Permits.WithLabelValues(tok.policy, "extend", "extended").Inc()
	yes := true
	writeJSON(w, http.StatusOK, &PermitAnswer{Key: tok.key, Policy: tok.policy, Extended: &yes, TTLMS: ceilMillis(ttl)})
}
