package config

import (
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden"
)

// InlineLimits is the operator's decision on inline limits: a "limit" given
// in an HTTP API request instead of a configured policy. Callers choose
// such a limit themselves, and with it how much store memory a key holds
// and for how long, so the service refuses them unless Enabled, and bounds
// them by the maxima when enabled. A zero maximum means the default.
//
// In a native config document it is the top-level inline_limits mapping:
//
//	inline_limits:
//	  enabled: true
//	  max_period: 1h          # longest period (and so key TTL)
//	  max_rate: 10000         # largest rate (and token bucket burst)
//	  max_sliding_log: 1000   # largest sliding_log rate: entries per key
//	  max_cost: 1000          # largest cost of one request
type InlineLimits struct {
	Enabled       bool
	MaxPeriod     time.Duration
	MaxRate       int64
	MaxSlidingLog int64
	MaxCost       int64
	// Source is "file:line" of the definition; empty when not from a file.
	Source string
}

// The defaults of InlineLimits' maxima.
const (
	DefaultInlineMaxPeriod     = time.Hour
	DefaultInlineMaxRate       = 10000
	DefaultInlineMaxSlidingLog = 1000
	DefaultInlineMaxCost       = 1000
)

// WithDefaults returns il with every zero maximum set to its default.
func (il InlineLimits) WithDefaults() InlineLimits {
	if il.MaxPeriod == 0 {
		il.MaxPeriod = DefaultInlineMaxPeriod
	}
	if il.MaxRate == 0 {
		il.MaxRate = DefaultInlineMaxRate
	}
	if il.MaxSlidingLog == 0 {
		il.MaxSlidingLog = DefaultInlineMaxSlidingLog
	}
	if il.MaxCost == 0 {
		il.MaxCost = DefaultInlineMaxCost
	}
	return il
}

// Check reports the first maximum lim or cost exceeds, as an error
// wrapping ratewarden.ErrInvalidLimit that names the setting; il must have
// its defaults (WithDefaults).
func (il InlineLimits) Check(lim ratewarden.Limit, cost int64) error {
	var msg string
	switch {
	case lim.Period > il.MaxPeriod:
		msg = fmt.Sprintf("period %v is above inline_limits.max_period %v", lim.Period, il.MaxPeriod)
	case lim.Algorithm == ratewarden.SlidingLog && lim.Rate > il.MaxSlidingLog:
		msg = fmt.Sprintf("sliding_log rate %d is above inline_limits.max_sliding_log %d", lim.Rate, il.MaxSlidingLog)
	case lim.Rate > il.MaxRate:
		msg = fmt.Sprintf("rate %d is above inline_limits.max_rate %d", lim.Rate, il.MaxRate)
	case lim.Burst > il.MaxRate:
		msg = fmt.Sprintf("burst %d is above inline_limits.max_rate %d", lim.Burst, il.MaxRate)
	case lim.Algorithm == ratewarden.TokenBucket && lim.Burst > lim.Rate && lim.Period/time.Duration(lim.Rate) > il.MaxPeriod/time.Duration(lim.Burst):
		// A full refill takes Burst/Rate periods, and the key lives that long.
		msg = fmt.Sprintf("token_bucket refill %d/%d × %v is above inline_limits.max_period %v", lim.Burst, lim.Rate, lim.Period, il.MaxPeriod)
	case cost > il.MaxCost:
		msg = fmt.Sprintf("cost %d is above inline_limits.max_cost %d", cost, il.MaxCost)
	default:
		return nil
	}
	return fmt.Errorf("config: %s: %w", msg, ratewarden.ErrInvalidLimit)
}

// inlineLimits reads the top-level inline_limits mapping.
func (p *parser) inlineLimits(f field) {
	if prev := p.l.cfg.Inline; prev != nil {
		p.errf(f.key, "inline_limits given twice (first at %s)", prev.Source)
		return
	}
	fields, ok := p.mapping(f.val, "inline_limits", "enabled", "max_period", "max_rate", "max_sliding_log", "max_cost")
	if !ok {
		return
	}
	il := &InlineLimits{Source: p.where(f.key)}
	for _, fld := range fields {
		ok = p.inlineField(fld, il) && ok
	}
	if ok {
		p.l.cfg.Inline = il
	}
}

func (p *parser) inlineField(f field, il *InlineLimits) bool {
	w := "inline_limits: " + f.name
	var good bool
	switch f.name {
	case "enabled":
		il.Enabled, good = p.boolean(f.val, w)
	case "max_period":
		var s string
		if s, good = p.str(f.val, w); good {
			pl, err := ratewarden.ParseLimit("1/" + s)
			if err != nil {
				p.errf(f.val, "%s %q: want a count and a unit ms, s, m, h or d, e.g. 1h", w, s)
				return false
			}
			il.MaxPeriod = pl.Period
		}
	case "max_rate":
		il.MaxRate, good = p.integer(f.val, w, 1, ratewarden.MaxRate)
	case "max_sliding_log":
		il.MaxSlidingLog, good = p.integer(f.val, w, 1, ratewarden.MaxRate)
	case "max_cost":
		il.MaxCost, good = p.integer(f.val, w, 1, ratewarden.MaxRate)
	}
	return good
}
