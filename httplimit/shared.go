package httplimit

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"weak"

	"github.com/ratewarden/ratewarden"
)

// counters remembers, per Limiter, which middlewares count on which
// counters, so that New can warn when two count on the same ones by
// accident (two WithLimits middlewares stacked on one route: each request
// is counted twice, and PerMinute(5) admits 2). Both sides are weak: a
// Limiter or Middleware nobody uses any more is forgotten.
var counters = struct {
	sync.Mutex
	byLimiter map[weak.Pointer[ratewarden.Limiter]]map[string][]weak.Pointer[Middleware]
}{byLimiter: map[weak.Pointer[ratewarden.Limiter]]map[string][]weak.Pointer[Middleware]{}}

// register records m's counters on l and logs one warning when another
// live Middleware on l counts on one of them: the same rule (and plan)
// name with a policy of the same scope, so the same keys in the store.
func (m *Middleware) register(l *ratewarden.Limiter) {
	lp, mp := weak.Make(l), weak.Make(m)
	counters.Lock()
	owners := counters.byLimiter[lp]
	if owners == nil {
		owners = map[string][]weak.Pointer[Middleware]{}
		counters.byLimiter[lp] = owners
		runtime.AddCleanup(l, forgetLimiter, lp)
	}
	var shared, scope string
	for i := range m.rules {
		for _, p := range m.rules[i].plans {
			for _, lim := range p.limits {
				id := p.prefix + "\x00" + lim.Scope()
				live := owners[id][:0]
				for _, o := range owners[id] {
					if o.Value() != nil {
						live = append(live, o)
					}
				}
				if len(live) > 0 && shared == "" {
					shared, scope = p.prefix[:len(p.prefix)-1], lim.Scope()
				}
				owners[id] = append(live, mp)
			}
		}
	}
	counters.Unlock()
	if shared != "" {
		m.log.LogAttrs(context.Background(), slog.LevelWarn, "httplimit: another Middleware on this Limiter counts on the same keys: the same rule name and a policy of the same scope; "+
			"a request through both is counted twice (two stacked PerMinute(5) admit 2 a minute, not 5): give one of them its own rule name with WithRule, or reuse one Middleware",
			slog.String("rule", shared), slog.String("scope", scope))
	}
}

func forgetLimiter(lp weak.Pointer[ratewarden.Limiter]) {
	counters.Lock()
	delete(counters.byLimiter, lp)
	counters.Unlock()
}
