package rls

import (
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// plan is what the Service derives from a configuration when it is put
// in force, so that a request only matches, counts and answers: for each
// Envoy domain the start of its store keys and, for each descriptor node
// with a rate_limit, what a descriptor ending there counts and how it is
// reported. Metric series are looked up on first use and kept with it.
type plan struct {
	cfg     *config.Config
	domains map[string]*domainPlan
}

// domainPlan is one Envoy domain's part of a plan.
type domainPlan struct {
	dom       *config.Domain
	keyPrefix string // "envoy/" and the escaped domain: every store key's start
	nodes     map[*config.Descriptor]*nodePlan
	renderers rendererCache // headers of several limits at once
}

// nodePlan is a descriptor node with a rate_limit, resolved: what evalDesc
// takes from it.
type nodePlan struct {
	id     int // among its domain's nodes, for rendererCache keys
	rl     *config.RateLimit
	kind   int
	label  string // the rate limit's name, else the node's path
	shadow bool
	quota  bool
	qcfg   bool
	period time.Duration
	limit  ratewarden.Limit
	fp     fallback.Policy
	shared []string // share_threshold wildcards along the path (see evalDesc)
	// current is the answer's current_limit, shared by every answer that
	// reports this limit: read-only once built (protobuf messages may be
	// marshaled concurrently, never modified).
	current  *rlspb.RateLimitResponse_RateLimit
	renderer *httplimit.Renderer // the headers of this limit alone
	series   telemetry.Series
}

// newPlan derives the plan of cfg.
func (g *Service) newPlan(cfg *config.Config) *plan {
	pl := &plan{cfg: cfg, domains: make(map[string]*domainPlan, len(cfg.Domains))}
	for name, d := range cfg.Domains {
		dp := &domainPlan{dom: d, keyPrefix: "envoy/" + url.QueryEscape(name), nodes: map[*config.Descriptor]*nodePlan{}}
		// shared is nil, or holds the wildcard of each share_threshold
		// node above, "" for the others: one per level.
		var walk func(ds []*config.Descriptor, shared []string, depth int)
		walk = func(ds []*config.Descriptor, shared []string, depth int) {
			for _, n := range ds {
				sh := shared
				switch {
				case n.ShareThreshold && n.Prefix:
					sh = make([]string, depth+1)
					copy(sh, shared)
					sh[depth] = n.Value + "*"
				case shared != nil:
					sh = append(shared[:depth:depth], "")
				}
				if n.RateLimit != nil {
					np := g.newNodePlan(cfg, d, n, sh)
					np.id = len(dp.nodes)
					dp.nodes[n] = np
				}
				walk(n.Descriptors, sh, depth+1)
			}
		}
		walk(d.Descriptors, nil, 0)
		pl.domains[name] = dp
	}
	return pl
}

// newNodePlan resolves node n of domain d (its rate_limit is not nil);
// shared holds the share_threshold wildcard of each node on its path, or
// is nil when none has one.
func (g *Service) newNodePlan(cfg *config.Config, d *config.Domain, n *config.Descriptor, shared []string) *nodePlan {
	rl := n.RateLimit
	// shadow_mode wins over quota_mode: a shadow status is OK already.
	np := &nodePlan{
		rl: rl, shadow: n.Shadow || n.QuotaMode, quota: n.QuotaMode && !n.Shadow, qcfg: n.QuotaMode,
		label: n.Path, period: config.Units[rl.Unit], shared: shared,
	}
	if rl.Name != "" {
		np.label = rl.Name
	}
	switch {
	case rl.Unlimited:
		np.kind = kindUnlimited
	case rl.RequestsPerUnit == 0:
		np.kind = kindZero
	default:
		np.kind, np.limit = kindCounted, rl.Limit
		np.fp = decide.Failure(cfg, g.defaultFailure, rl.Failure, d.Failure)
	}
	np.current = currentLimit(rl, 0)
	np.renderer = httplimit.NewRenderer(decide.DraftSet, np.headerPolicy())
	np.series = telemetry.Series{API: "grpc", Domain: d.Name, Policy: np.label}
	return np
}

// headerPolicy is the node's item in ratewarden's headers: a limit of 0
// is advertised as a fixed window of its period.
func (np *nodePlan) headerPolicy() httplimit.Policy {
	lim := np.limit
	if np.kind == kindZero {
		lim = zeroLimit(np.period)
	}
	return httplimit.Policy{Name: np.label, Limit: lim}
}

// zeroLimit is the Limit a requests_per_unit 0 reports: a fixed window of
// period that admits nothing.
func zeroLimit(period time.Duration) ratewarden.Limit {
	return ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Period: period}
}

// currentLimit is the current_limit of an answer on rl, with the unit
// multiplier of an override (mult > 1).
func currentLimit(rl *config.RateLimit, mult uint32) *rlspb.RateLimitResponse_RateLimit {
	cl := &rlspb.RateLimitResponse_RateLimit{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rlsUnits[rl.Unit]}
	if mult > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return cl
}

// maxRenderers bounds a domain's rendererCache: the lists of limits its
// requests name are few in practice; past the bound, a list's renderer is
// built for the request.
const maxRenderers = 256

// rendererCache keeps the header renderers of lists of limits, keyed by
// the node ids of the list: read without a lock, copied on write.
type rendererCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*httplimit.Renderer]
}

// get returns the renderer of policies, whose node ids make key.
func (c *rendererCache) get(key []byte, policies []httplimit.Policy) *httplimit.Renderer {
	if m := c.m.Load(); m != nil {
		if r := (*m)[string(key)]; r != nil {
			return r
		}
	}
	r := httplimit.NewRenderer(decide.DraftSet, policies...)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= maxRenderers {
		return r
	}
	m := make(map[string]*httplimit.Renderer, 1+len(mapOrNil(old)))
	for k, v := range mapOrNil(old) {
		m[k] = v
	}
	m[string(key)] = r
	c.m.Store(&m)
	return r
}

func mapOrNil(p *map[string]*httplimit.Renderer) map[string]*httplimit.Renderer {
	if p == nil {
		return nil
	}
	return *p
}
