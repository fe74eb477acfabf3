package server

import (
	"context"
	"fmt"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/service/config"
)

// unit is one check of a decision: Cost units against every one of Limits
// for one key, decided atomically.
type unit struct {
	key    string
	limits []ratewarden.Limit
	cost   int64
	fp     config.FailurePolicy
	shadow bool // every limit of the unit is in shadow mode
	// impossible: the cost exceeds a limit's capacity, so the unit can
	// never be admitted (Envoy's hits_addend may be larger than a limit);
	// it is only peeked at cost 0 to report the state, and denied.
	impossible bool
	// res is the decision of each limit, after decide.
	res []ratewarden.Result
}

// limiter returns the Limiter of failure policy fp, built on the first
// store the backend hands out for it; store calls through it are timed and
// counted by op and failure policy. A backend failure is a store failure.
func (s *Server) limiter(fp config.FailurePolicy) (*ratewarden.Limiter, error) {
	if l, ok := s.limiters.Load(fp); ok {
		return l.(*ratewarden.Limiter), nil
	}
	st, err := s.backend.Store(fp)
	if err == nil && nilcheck.Is(st) {
		err = fmt.Errorf("no store%s", nilcheck.Describe(st))
	}
	if err != nil {
		// %v: whatever the backend's error wraps, this is the store's
		// failure (503 / UNAVAILABLE), not the caller's input.
		return nil, fmt.Errorf("server: store for %s: %v: %w", fp, err, ratewarden.ErrStoreUnavailable)
	}
	l, err := ratewarden.New(newMeteredStore(st, fp, s.m, s.tracer))
	if err != nil {
		return nil, fmt.Errorf("server: limiter for %s: %v: %w", fp, err, ratewarden.ErrStoreUnavailable)
	}
	got, _ := s.limiters.LoadOrStore(fp, l)
	return got.(*ratewarden.Limiter), nil
}

// decide decides units as one request, through Limiter.AllowKeys: each
// unit atomic on its key; peeked first and consumed only when every
// non-shadow unit would be admitted, so a denied request consumes nothing
// (best effort across keys, exact per key). Units of different failure
// policies go through their own Limiters (KeyCheck.Via).
//
// denied says the request is denied whatever the units say (a limit of 0
// applies), and so does an impossible unit that is not shadow: then every
// unit is only peeked, to report its state. Impossible shadow units are
// peeked after the decision.
func (s *Server) decide(ctx context.Context, units []*unit, denied bool) error {
	checks := make([]ratewarden.KeyCheck, len(units))
	for i, u := range units {
		lim, err := s.limiter(u.fp)
		if err != nil {
			return err
		}
		checks[i] = ratewarden.KeyCheck{Key: u.key, Limits: u.limits, Cost: u.cost, Shadow: u.shadow, Via: lim}
		if u.impossible {
			checks[i].Cost = 0
			denied = denied || !u.shadow
		}
	}
	var decided, peekedAfter []int
	for i, u := range units {
		if u.impossible && !denied {
			peekedAfter = append(peekedAfter, i)
		} else {
			decided = append(decided, i)
		}
	}
	if err := run(ctx, units, checks, decided, !denied); err != nil {
		return err
	}
	return run(ctx, units, checks, peekedAfter, false)
}

// run decides the units at idx together, consuming or peeking, and stores
// their results; an impossible unit's are denied.
func run(ctx context.Context, units []*unit, checks []ratewarden.KeyCheck, idx []int, consume bool) error {
	if len(idx) == 0 {
		return nil
	}
	cs := make([]ratewarden.KeyCheck, len(idx))
	for j, i := range idx {
		cs[j] = checks[i]
	}
	lim := cs[0].Via // every check names its Limiter
	decideKeys := lim.PeekKeys
	if consume {
		decideKeys = lim.AllowKeys
	}
	d, err := decideKeys(ctx, cs...)
	if err != nil {
		return err
	}
	for j, i := range idx {
		u := units[i]
		u.res = d.Checks[j].Results
		if u.impossible {
			for k := range u.res {
				u.res[k].Allowed = false
			}
		}
	}
	return nil
}
