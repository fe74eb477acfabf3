package api

import (
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// plan is what the Service derives from a configuration when it is put
// in force, so that a request only looks up, counts and answers: for each
// policy its key prefix and headers. Metric series are looked up on first
// use and kept with it.
type plan struct {
	cfg      *config.Config
	policies map[string]*policyPlan
	inline   telemetry.Series // the HTTP API's inline limits
}

// policyPlan is an HTTP API policy, resolved.
type policyPlan struct {
	p         *config.Policy
	keyPrefix string // "policy/<escaped name>/"
	limitStr  string // p.Limit.String() (p.Concurrency.String()), for the answer
	fp        fallback.Policy
	renderer  *httplimit.Renderer // nil for a concurrency policy
	series    telemetry.Series
}

// newPlan derives the plan of cfg.
func (s *Service) newPlan(cfg *config.Config) *plan {
	pl := &plan{
		cfg:      cfg,
		policies: make(map[string]*policyPlan, len(cfg.Policies)),
		inline:   telemetry.Series{API: "http", Policy: "inline"},
	}
	for name, p := range cfg.Policies {
		pp := &policyPlan{
			p:         p,
			keyPrefix: policyKeyPrefix(name),
			fp:        decide.Failure(cfg, s.defaultFailure, p.Failure),
			series:    telemetry.Series{API: "http", Policy: name},
		}
		if p.Concurrency != nil {
			pp.limitStr = p.Concurrency.String()
		} else {
			pp.limitStr = p.Limit.String()
			pp.renderer = httplimit.NewRenderer(decide.DraftSet, httplimit.Policy{Name: name, Limit: p.Limit})
		}
		pl.policies[name] = pp
	}
	return pl
}
