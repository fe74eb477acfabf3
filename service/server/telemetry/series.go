package telemetry

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden"
)

// Decision outcomes, as the outcome label names them.
const (
	outcomeAllowed = iota
	outcomeDenied
	outcomeShadowDenied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "shadow_denied"}

// outcome is the outcome of a result, shadow or not.
func outcome(allowed, shadow bool) int {
	switch {
	case allowed:
		return outcomeAllowed
	case shadow:
		return outcomeShadowDenied
	}
	return outcomeDenied
}

// Series are the metric series of one API, domain and policy, each looked
// up in its vector the first time it counts and kept: a decision then
// counts without hashing its labels. Looking up on first use, not when
// the plan is made, keeps /metrics free of series that never counted.
// Make one as a literal naming its labels; do not copy it once used.
type Series struct {
	API, Domain, Policy string
	decisions           [numOutcomes]atomic.Pointer[prometheus.Counter]
	near                atomic.Pointer[prometheus.Counter]
}

// Decision counts a decision with result res of this series' policy, as
// Metrics.Decision does.
func (sr *Series) Decision(m *Metrics, res *ratewarden.Result, shadow bool) {
	o := outcome(res.Allowed, shadow)
	c := sr.decisions[o].Load()
	if c == nil {
		c = sr.lookup(&sr.decisions[o], m.decisions, outcomeNames[o])
	}
	(*c).Inc()
	if res.Degraded() {
		m.degraded.WithLabelValues(sr.API, sr.Domain, sr.Policy, res.Source.String()).Inc()
	}
}

// NearLimit adds n to the near-limit count of this series' policy.
func (sr *Series) NearLimit(m *Metrics, n int64) {
	c := sr.near.Load()
	if c == nil {
		c = sr.lookup(&sr.near, m.NearLimit, "")
	}
	(*c).Add(float64(n))
}

// lookup finds the series of vec with this series' labels and last (when
// not empty) and keeps it in p.
func (sr *Series) lookup(p *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, last string) *prometheus.Counter {
	var c prometheus.Counter
	if last != "" {
		c = vec.WithLabelValues(sr.API, sr.Domain, sr.Policy, last)
	} else {
		c = vec.WithLabelValues(sr.API, sr.Domain, sr.Policy)
	}
	p.Store(&c)
	return &c
}
