package rls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/decide"
	"github.com/ratewarden/ratewarden/service/server/telemetry"
)

// Service implements envoy.service.ratelimit.v3.RateLimitService. Make
// one with New and give it a configuration (SetConfig) before it serves.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	log            *slog.Logger
	m              *telemetry.Metrics
	lims           *decide.Limiters
	tracer         trace.Tracer // nil: no spans
	maxKey         int
	envoy          EnvoyCompat
	nearRatio      float64
	defaultFailure fallback.Policy

	plan atomic.Pointer[plan] // the configuration in force, resolved
}

// Deps are what a Service decides with. The server hands them over
// checked (its options validate them); New takes them as they are.
type Deps struct {
	Log      *slog.Logger
	Metrics  *telemetry.Metrics
	Limiters *decide.Limiters
	Tracer   trace.Tracer // nil: no spans
	// MaxKey caps the bytes of the domain and a descriptor's entries
	// together (--max-key-bytes).
	MaxKey int
	Envoy  EnvoyCompat
	// NearRatio is the share of a limit past which allowed hits count as
	// near the limit: above 0, at most 1.
	NearRatio float64
	// DefaultFailure is the failure policy of limits whose config names
	// none.
	DefaultFailure fallback.Policy
}

// New returns a Service on d.
func New(d Deps) *Service {
	return &Service{log: d.Log, m: d.Metrics, lims: d.Limiters, tracer: d.Tracer, maxKey: d.MaxKey,
		envoy: d.Envoy, nearRatio: d.NearRatio, defaultFailure: d.DefaultFailure}
}

// SetConfig puts cfg's Envoy domains in force: requests already deciding
// finish on the configuration they started with.
func (g *Service) SetConfig(cfg *config.Config) { g.plan.Store(g.newPlan(cfg)) }

// MaxDescriptors bounds the descriptors of one request.
const MaxDescriptors = 256

// descriptor kinds.
const (
	kindNone      = iota // no limit applies (no match, no rate_limit, replaced, unknown domain)
	kindUnlimited        // rate_limit.unlimited
	kindZero             // requests_per_unit 0: always over the limit
	kindCounted          // counted in the store
)

// evalDesc is the evaluation of one request descriptor.
type evalDesc struct {
	kind   int
	node   *nodePlan         // the configured limit that applies; nil for an override
	rl     *config.RateLimit // the limit reported as current_limit
	mult   uint32            // unit_multiplier of an override, else 0
	label  string            // metrics/header name: rate limit name or descriptor path
	shadow bool              // never denies the request: shadow_mode or quota_mode
	quota  bool              // quota_mode (or QUOTA_MODE): an over-limit status is OK, with no duration_until_reset
	qcfg   bool              // the matched limit's own quota_mode
	period time.Duration     // the limit's period (also for requests_per_unit 0)
	shared []string          // share_threshold: entry i counts under wildcard shared[i] when not ""
	key    string
	khash  uint64 // decide.KeyHash(key)
	limit  ratewarden.Limit
	cost   int64
	fp     fallback.Policy
	unit   *unit
	idx    int   // index of limit in unit
	later  int64 // hits of the descriptors after this one counted on the same limit and key
	slot   int   // index of the eval's slot in rlsCall.slots (group)
}

var rlsUnits = map[string]rlspb.RateLimitResponse_RateLimit_Unit{
	"second": rlspb.RateLimitResponse_RateLimit_SECOND,
	"minute": rlspb.RateLimitResponse_RateLimit_MINUTE,
	"hour":   rlspb.RateLimitResponse_RateLimit_HOUR,
	"day":    rlspb.RateLimitResponse_RateLimit_DAY,
	"week":   rlspb.RateLimitResponse_RateLimit_WEEK,
	"month":  rlspb.RateLimitResponse_RateLimit_MONTH,
	"year":   rlspb.RateLimitResponse_RateLimit_YEAR,
}

var overrideUnits = map[typepb.RateLimitUnit]string{
	typepb.RateLimitUnit_SECOND: "second",
	typepb.RateLimitUnit_MINUTE: "minute",
	typepb.RateLimitUnit_HOUR:   "hour",
	typepb.RateLimitUnit_DAY:    "day",
	typepb.RateLimitUnit_MONTH:  "month",
	typepb.RateLimitUnit_YEAR:   "year",
	// envoy.type.v3.RateLimitUnit has no WEEK in the go-control-plane this
	// module uses, but newer Envoys send 7 for it, the response's WEEK;
	// envoyproxy/ratelimit takes it as a week too.
	overrideWeek: "week",
}

// overrideWeek is WEEK in a limit override: the number the response's
// unit gives it.
const overrideWeek = typepb.RateLimitUnit(rlspb.RateLimitResponse_RateLimit_WEEK)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// ShouldRateLimit decides a request's descriptors as envoyproxy/ratelimit
// documents them: each descriptor walks its domain's tree, the limits that
// match are counted, the request is OVER_LIMIT when any non-shadow one is.
// An unknown domain, or a descriptor without a limit, is OK. It validates
// the whole request, resolves each descriptor to what it counts, decides
// them together and renders the answer.
func (g *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if g.tracer == nil {
		return g.decide(ctx, req)
	}
	return g.traceRLS(ctx, req, func(ctx context.Context) (*rlspb.RateLimitResponse, error) { return g.decide(ctx, req) })
}

// decide is ShouldRateLimit without its span. The request's working
// state lives in a pooled rlsCall; the answer never refers to it.
func (g *Service) decide(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	c := newRLSCall()
	defer c.free()
	// Validate everything before any store call: bad input consumes nothing.
	hits, err := c.validate(req, g.maxKey)
	if err != nil {
		return nil, err
	}
	sn := g.plan.Load()
	dp := sn.domains[req.GetDomain()]
	if dp == nil {
		return g.unknownDomain(req, len(c.ends)), nil
	}
	if err := g.resolve(req, c, hits, dp, sn); err != nil {
		return nil, err
	}
	if err := g.decideAll(ctx, c); err != nil {
		return nil, err
	}
	return g.render(req, dp, c), nil
}

// unknownDomain is the answer for a domain the config does not have: OK
// for each of the n descriptors.
func (g *Service) unknownDomain(req *rlspb.RateLimitRequest, n int) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, n)}
	for i := range n {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	if g.envoy.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, nil, nil)
	}
	return resp
}

// validate checks a request, keeps each descriptor's entries and returns
// the request's hits_addend (1 when unset). maxKey caps the bytes of the
// domain and a descriptor's entries together: the key they make.
func (c *rlsCall) validate(req *rlspb.RateLimitRequest, maxKey int) (int64, error) {
	if path := utf8Error(req); path != "" {
		return 0, invalid("%s: invalid UTF-8", path)
	}
	if req.GetDomain() == "" {
		return 0, invalid("domain is required")
	}
	if err := checkString("domain", req.GetDomain(), maxKey); err != nil {
		return 0, err
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return 0, invalid("at least one descriptor is required")
	}
	if len(ds) > MaxDescriptors {
		return 0, invalid("%d descriptors; at most %d per request", len(ds), MaxDescriptors)
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // proto3 cannot tell 0 from unset; Envoy means 1
	}
	for i, d := range ds {
		if len(d.GetEntries()) == 0 {
			return 0, invalid("descriptors[%d]: at least one entry is required", i)
		}
		size := len(req.GetDomain())
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return 0, invalid("descriptors[%d].entries[%d].key: key is required", i, j)
			}
			if !validString(e.GetKey(), maxKey) || !validString(e.GetValue(), maxKey) {
				return 0, checkEntry(e, i, j, maxKey)
			}
			// The store key separates entries ("/key=value"): count the two
			// separators, so every key within the cap fits the store's
			// (backend.StoreKeyBytes: three times the cap, escaped, plus 1 KiB).
			size += len(e.GetKey()) + len(e.GetValue()) + 2
			c.entries = append(c.entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		c.ends = append(c.ends, len(c.entries))
		if size > maxKey {
			return 0, invalid("descriptors[%d]: domain and entries make a key of %d bytes; the cap is %d bytes (--max-key-bytes)", i, size, maxKey)
		}
		if d.GetIsNegativeHits() {
			return 0, invalid("descriptors[%d]: is_negative_hits is not supported (a decision never refunds)", i)
		}
		if o := d.GetLimit(); o != nil {
			if _, _, err := overridePeriod(o, i); err != nil {
				return 0, err
			}
		}
	}
	return hits, nil
}

// validString reports whether a string field passes checkString.
func validString(v string, maxKey int) bool { return len(v) <= maxKey && utf8.ValidString(v) }

// checkEntry checks the key and value of entry j of descriptor i.
func checkEntry(e *rlcommon.RateLimitDescriptor_Entry, i, j, maxKey int) error {
	path := fmt.Sprintf("descriptors[%d].entries[%d].", i, j)
	if err := checkString(path+"key", e.GetKey(), maxKey); err != nil {
		return err
	}
	return checkString(path+"value", e.GetValue(), maxKey)
}

// checkString refuses a string field (named by its path) that is not
// valid UTF-8 or is longer than maxKey bytes. grpc-go already refuses
// invalid UTF-8 on the wire; this covers in-process callers.
func checkString(path, v string, maxKey int) error {
	switch {
	case !utf8.ValidString(v):
		return invalid("%s: invalid UTF-8", path)
	case len(v) > maxKey:
		return invalid("%s: %d bytes; the cap is %d bytes (--max-key-bytes)", path, len(v), maxKey)
	}
	return nil
}

// resolve turns each descriptor into what it counts: the matched node's
// limit (or an override), its key, cost, failure policy and label; limits
// replaced by another that matched count nothing.
func (g *Service) resolve(req *rlspb.RateLimitRequest, c *rlsCall, hits int64, dp *domainPlan, sn *plan) error {
	ds := req.GetDescriptors()
	evals := c.newEvals(len(ds))
	for i, d := range ds {
		e := &evals[i]
		e.cost = hits
		if h := d.GetHitsAddend(); h != nil {
			e.cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		entries := c.descEntries(i)
		node := dp.dom.Match(entries)
		if o := d.GetLimit(); o != nil {
			if err := g.override(e, o, node, dp.dom, sn, i); err != nil {
				return err
			}
		} else if node != nil && node.RateLimit != nil {
			np := dp.nodes[node]
			e.configured(np)
			c.replaced = append(c.replaced, np.rl.Replaces...)
		}
		if g.envoy.QuotaMode && !e.shadow && e.kind != kindNone && e.kind != kindUnlimited {
			// QUOTA_MODE applies to what would be OVER_LIMIT: not to a
			// shadow limit, already OK, as in envoyproxy/ratelimit.
			e.shadow, e.quota = true, true
		}
		if e.kind == kindCounted {
			c.key = appendEnvoyKey(c.key[:0], dp.keyPrefix, entries, e.shared)
			if e.mult > 0 {
				// An override counts on its own state, apart from the
				// configured limit of the same entries (and from other
				// override rates): limits with one algorithm and period
				// on one key would share a counter, so the stricter of
				// two would see the other's hits and one of them could
				// not be enforced at its own rate. '#' never appears
				// unescaped in envoyKey, so no entry can forge this.
				c.key = append(c.key, "#override="...)
				c.key = append(c.key, url.QueryEscape(e.limit.String())...)
			}
			e.key = string(c.key)
			e.khash = keyHash64(e.key)
		}
	}
	if len(c.replaced) == 0 {
		return nil
	}
	for i := range evals {
		// An unlimited limit stays unlimited, replaced or not, as in
		// envoyproxy/ratelimit.
		if e := &evals[i]; e.rl != nil && e.rl.Name != "" && e.mult == 0 && e.kind != kindUnlimited && slices.Contains(c.replaced, e.rl.Name) {
			*e = evalDesc{kind: kindNone}
		}
	}
	return nil
}

// configured fills e from np, the rate_limit of the node a descriptor
// matched.
func (e *evalDesc) configured(np *nodePlan) {
	e.node, e.rl, e.kind, e.label = np, np.rl, np.kind, np.label
	e.shadow, e.quota, e.qcfg, e.period, e.shared = np.shadow, np.quota, np.qcfg, np.period, np.shared
	e.limit, e.fp = np.limit, np.fp
}

// decideAll decides the counted descriptors in one step and maps a
// failure to its gRPC status.
func (g *Service) decideAll(ctx context.Context, c *rlsCall) error {
	if c.group(); len(c.units) == 0 {
		return nil
	}
	zeroDenies := false // a non-shadow requests_per_unit 0 denies the request
	for i := range c.evals {
		zeroDenies = zeroDenies || (c.evals[i].kind == kindZero && !c.evals[i].shadow)
	}
	err := g.decideUnits(ctx, c, zeroDenies)
	switch ratewarden.Classify(ctx, err) {
	case ratewarden.NoError:
		return nil
	case ratewarden.CallerCanceled:
		return status.FromContextError(ctx.Err()).Err() // CANCELED or DEADLINE_EXCEEDED
	}
	// The store's error may name addresses and the caller's values: it is
	// logged with the keys hashed, and the caller gets a fixed message.
	msg := err.Error()
	for i := range c.units {
		msg = decide.Redact(msg, c.units[i].key)
	}
	if k := ratewarden.Classify(ctx, err); k == ratewarden.StoreUnavailable || k == ratewarden.KeyState {
		g.log.Warn("store unavailable", "err", msg)
		return status.Error(codes.Unavailable, "the rate limit store could not decide; retry later")
	}
	g.log.Info("request refused by the limiter", "err", msg)
	return invalid("the request is invalid for its limits (a cost or limit the store refuses)")
}

// render builds the answer, as envoyproxy/ratelimit gives it: one status
// per descriptor, the overall code, and the headers and dynamic metadata
// the Service's EnvoyCompat asks for.
func (g *Service) render(req *rlspb.RateLimitRequest, dp *domainPlan, c *rlsCall) *rlspb.RateLimitResponse {
	evals := c.evals
	resp, boxes := newResponse(len(evals))
	now := time.Now()
	var quotaOver []int // descriptors over a quota_mode limit
	for i := range evals {
		st := &boxes[i].st
		over := g.status(dp.dom.Name, &evals[i], now, &boxes[i])
		switch {
		case over && evals[i].quota:
			quotaOver = append(quotaOver, i)
		case st.Code == rlspb.RateLimitResponse_OVER_LIMIT:
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if g.envoy.ShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OK // SHADOW_MODE: report, never deny
	}
	switch g.envoy.Headers {
	case HeadersRatewarden:
		// No Retry-After on a request that passes, SHADOW_MODE's too.
		resp.ResponseHeadersToAdd = c.draftHeaders(dp, resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT, now)
	case HeadersEnvoy:
		resp.ResponseHeadersToAdd = g.envoy.headers(resp.Statuses, evals, now)
	}
	if g.envoy.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, evals, quotaOver)
	}
	return resp
}

// statusBox holds a descriptor's status and its duration_until_reset, so
// that both are one allocation.
type statusBox struct {
	st    rlspb.RateLimitResponse_DescriptorStatus
	reset durationpb.Duration
}

// oneStatus is the answer to a request of one descriptor, in one
// allocation.
type oneStatus struct {
	resp rlspb.RateLimitResponse
	sts  [1]*rlspb.RateLimitResponse_DescriptorStatus
	box  [1]statusBox
}

// newResponse returns an answer with n statuses, OK, and the boxes they
// point into.
func newResponse(n int) (*rlspb.RateLimitResponse, []statusBox) {
	var resp *rlspb.RateLimitResponse
	var boxes []statusBox
	if n == 1 {
		one := new(oneStatus)
		resp, boxes = &one.resp, one.box[:]
		resp.Statuses = one.sts[:]
	} else {
		resp, boxes = new(rlspb.RateLimitResponse), make([]statusBox, n)
		resp.Statuses = make([]*rlspb.RateLimitResponse_DescriptorStatus, n)
	}
	resp.OverallCode = rlspb.RateLimitResponse_OK
	for i := range boxes {
		resp.Statuses[i] = &boxes[i].st
	}
	return resp, boxes
}

// setReset sets b's duration_until_reset to d.
func (b *statusBox) setReset(d time.Duration) {
	b.reset.Seconds = int64(d / time.Second)
	b.reset.Nanos = int32(d % time.Second)
	b.st.DurationUntilReset = &b.reset
}

// status fills b with the status of descriptor e and reports whether it
// is over its limit. Over the limit, limit_remaining is 0 and
// duration_until_reset the end of the limit's window, as
// envoyproxy/ratelimit reports them; a shadow limit's code is OK, and a
// quota_mode limit's is OK with no duration_until_reset.
func (g *Service) status(domain string, e *evalDesc, now time.Time, b *statusBox) bool {
	st := &b.st
	st.Code = rlspb.RateLimitResponse_OK
	over := false
	switch e.kind {
	case kindUnlimited:
		st.LimitRemaining = math.MaxUint32
		return false
	case kindZero:
		over = true
		st.CurrentLimit = e.currentLimit()
		b.setReset(windowReset(e.period, now))
		g.count(domain, e, &ratewarden.Result{})
	case kindCounted:
		res := &e.unit.res[e.idx]
		over = !res.Allowed
		if e.unit.impossible {
			// The cost can never pass: nothing was counted, and the
			// answer is the peer's for a full window.
			res.Remaining = 0
			res.RetryAfter = resetOf(e.limit, ratewarden.Result{}, now)
			if res.RetryAfter <= 0 {
				res.RetryAfter = e.limit.Period
			}
			res.ResetAfter = res.RetryAfter
		}
		st.CurrentLimit = e.currentLimit()
		if !over {
			// The remaining right after this descriptor's hits, as
			// envoyproxy/ratelimit counts descriptors one by one.
			st.LimitRemaining = uint32(min(addSat(res.Remaining, e.later), math.MaxUint32))
		}
		b.setReset(resetOf(e.limit, *res, now))
		g.count(domain, e, res)
		g.nearLimit(domain, e, res)
	default:
		return false
	}
	switch {
	case !over:
	case e.quota:
		st.DurationUntilReset = nil
	case !e.shadow:
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return over
}

// count counts e's decision, res, in the metrics: through its node's
// series, or looked up for an override.
func (g *Service) count(domain string, e *evalDesc, res *ratewarden.Result) {
	if e.node != nil {
		e.node.series.Decision(g.m, res, e.shadow)
		return
	}
	g.m.Decision("grpc", domain, e.label, *res, e.shadow)
}

// currentLimit is e's current_limit: its node's, or made for an override.
func (e *evalDesc) currentLimit() *rlspb.RateLimitResponse_RateLimit {
	if e.node != nil {
		return e.node.current
	}
	return currentLimit(e.rl, e.mult)
}

// resetOf is the duration_until_reset of a limit: for a fixed window, the
// time to the end of the current window, as envoyproxy/ratelimit counts
// it (whole seconds, epoch-aligned); for the other algorithms, the time
// until the limit is back to full.
func resetOf(lim ratewarden.Limit, res ratewarden.Result, now time.Time) time.Duration {
	if lim.Algorithm == ratewarden.FixedWindow {
		return windowReset(lim.Period, now)
	}
	return res.ResetAfter
}

// windowReset is the time from now to the end of the epoch-aligned window
// of period, in whole seconds (1 to the period's seconds), as
// envoyproxy/ratelimit's duration_until_reset and RateLimit-Reset.
func windowReset(period time.Duration, now time.Time) time.Duration {
	sec := int64(period / time.Second)
	if sec <= 0 {
		return period
	}
	return time.Duration(sec-now.Unix()%sec) * time.Second
}

// override applies a descriptor's limit override, as envoyproxy/ratelimit
// does: it replaces the configured rate (the algorithm stays the matched
// node's, fixed_window otherwise) and applies even without a matching node.
func (g *Service) override(e *evalDesc, o *rlcommon.RateLimitDescriptor_RateLimitOverride, node *config.Descriptor, dom *config.Domain, sn *plan, i int) error {
	period, mult, err := overridePeriod(o, i)
	if err != nil {
		return err
	}
	unit := overrideUnits[o.GetUnit()]
	e.rl = &config.RateLimit{Unit: unit, RequestsPerUnit: o.GetRequestsPerUnit()}
	e.mult, e.label, e.period = mult, "override", period
	alg, failure := config.DefaultEnvoyAlgorithm, fallback.Policy(0)
	if node != nil {
		e.label = node.Path + "(override)"
		if rl := node.RateLimit; rl != nil && rl.Counted() {
			alg, failure = rl.Limit.Algorithm, rl.Failure
		}
	}
	if o.GetRequestsPerUnit() == 0 {
		e.kind = kindZero
		return nil
	}
	e.kind = kindCounted
	e.limit = ratewarden.Limit{Algorithm: alg, Rate: int64(o.GetRequestsPerUnit()), Period: period}
	if err := e.limit.Validate(); err != nil {
		return invalid("descriptors[%d].limit: %v", i, err)
	}
	e.fp = decide.Failure(sn.cfg, g.defaultFailure, failure, dom.Failure)
	return nil
}

// overridePeriod returns the period of descriptor i's limit override and
// its unit_multiplier (at least 1), or an INVALID_ARGUMENT error when the
// unit is not supported or the period would be longer than MaxPeriod. The
// multiplier is checked before multiplying, so a huge one cannot wrap a
// time.Duration around to a short period.
func overridePeriod(o *rlcommon.RateLimitDescriptor_RateLimitOverride, i int) (time.Duration, uint32, error) {
	unit, ok := overrideUnits[o.GetUnit()]
	if !ok {
		return 0, 0, invalid("descriptors[%d].limit.unit: %s is not supported (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", i, o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	u := config.Units[unit]
	if time.Duration(mult) > ratewarden.MaxPeriod/u {
		return 0, 0, invalid("descriptors[%d].limit.unit_multiplier: %d %s is longer than the longest period, %v (at most %d %s)",
			i, mult, unit, ratewarden.MaxPeriod, int64(ratewarden.MaxPeriod/u), unit)
	}
	return u * time.Duration(mult), mult, nil
}

// addSat adds two costs (both >= 0), saturating at math.MaxInt64 instead
// of wrapping negative: a saturated cost is above every limit's capacity,
// so it is OVER_LIMIT and consumes nothing.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

var _ rlspb.RateLimitServiceServer = (*Service)(nil)
