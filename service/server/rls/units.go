package rls

import (
	"context"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
)

// unit is one check of a decision: Cost units against every one of Limits
// for one key, decided atomically.
type unit struct {
	key    string
	khash  uint64 // keyHash64 of key: compared before key when grouping
	limits []ratewarden.Limit
	cost   int64
	fp     fallback.Policy
	shadow bool // every limit of the unit is in shadow mode
	// impossible: the cost exceeds a limit's capacity, so the unit can
	// never be admitted (Envoy's hits_addend may be larger than a limit);
	// it is only peeked at cost 0 to report the state, and denied.
	impossible bool
	// res is the decision of each limit, after decide; res1 holds it when
	// the unit has one limit and is decided alone.
	res  []ratewarden.Result
	res1 [1]ratewarden.Result
}

// decideUnits decides units as one request, through Limiter.AllowKeys: each
// unit atomic on its key; peeked first and consumed only when every
// non-shadow unit would be admitted, so a denied request consumes nothing
// (best effort across keys, exact per key). Units of different failure
// policies go through their own Limiters (KeyCheck.Via). A lone unit of
// one limit is one Limiter.AllowN, the same single store call without the
// multi-key bookkeeping.
//
// denied says the request is denied whatever the units say (a limit of 0
// applies), and so does an impossible unit that is not shadow: then every
// unit is only peeked, to report its state. Impossible shadow units are
// peeked after the decision. c holds the checks' buffers.
func (g *Service) decideUnits(ctx context.Context, c *rlsCall, denied bool) error {
	units := c.units
	if len(units) == 1 && !units[0].impossible && !denied && len(units[0].limits) == 1 {
		u := &units[0]
		lim, err := g.lims.For(u.fp)
		if err != nil {
			return err
		}
		res, err := lim.AllowN(ctx, u.key, u.limits[0], u.cost)
		if err != nil {
			return err
		}
		u.res1[0] = res
		u.res = u.res1[:]
		return nil
	}
	checks := c.checks[:0]
	for i := range units {
		u := &units[i]
		lim, err := g.lims.For(u.fp)
		if err != nil {
			return err
		}
		kc := ratewarden.KeyCheck{Key: u.key, Limits: u.limits, Cost: u.cost, Shadow: u.shadow, Via: lim}
		if u.impossible {
			kc.Cost = 0
			denied = denied || !u.shadow
		}
		checks = append(checks, kc)
	}
	c.checks = checks
	decided, peekedAfter := c.idx[:0], c.idx2[:0]
	for i := range units {
		if units[i].impossible && !denied {
			peekedAfter = append(peekedAfter, i)
		} else {
			decided = append(decided, i)
		}
	}
	c.idx, c.idx2 = decided, peekedAfter
	if err := c.run(ctx, decided, !denied); err != nil {
		return err
	}
	return c.run(ctx, peekedAfter, false)
}

// run decides the units at idx together, consuming or peeking, and stores
// their results; an impossible unit's are denied.
func (c *rlsCall) run(ctx context.Context, idx []int, consume bool) error {
	if len(idx) == 0 {
		return nil
	}
	cs := c.sub[:0]
	for _, i := range idx {
		cs = append(cs, c.checks[i])
	}
	c.sub = cs
	lim := cs[0].Via // every check names its Limiter
	var d ratewarden.KeysDecision
	var err error
	if consume {
		d, err = lim.AllowKeys(ctx, cs...)
	} else {
		d, err = lim.PeekKeys(ctx, cs...)
	}
	if err != nil {
		return err
	}
	for j, i := range idx {
		u := &c.units[i]
		u.res = d.Checks[j].Results
		if u.impossible {
			for k := range u.res {
				u.res[k].Allowed = false
			}
		}
	}
	return nil
}
