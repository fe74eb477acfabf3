package server

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/service/config"
)

// rls implements envoy.service.ratelimit.v3.RateLimitService.
type rls struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *Server
}

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
	rl     *config.RateLimit // the limit reported as current_limit
	mult   uint32            // unit_multiplier of an override, else 0
	label  string            // metrics/header name: rate limit name or descriptor path
	shadow bool              // never denies the request: shadow_mode or quota_mode
	quota  bool              // quota_mode (or QUOTA_MODE): an over-limit status is OK, with no duration_until_reset
	qcfg   bool              // the matched limit's own quota_mode
	period time.Duration     // the limit's period (also for requests_per_unit 0)
	shared []string          // share_threshold: entry i counts under wildcard shared[i] when not ""
	key    string
	limit  ratewarden.Limit
	cost   int64
	fp     config.FailurePolicy
	unit   *unit
	idx    int   // index of limit in unit
	later  int64 // hits of the descriptors after this one counted on the same limit and key
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
func (g *rls) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return g.s.traceRLS(ctx, req, func(ctx context.Context) (*rlspb.RateLimitResponse, error) { return g.decide(ctx, req) })
}

// decide is ShouldRateLimit without its span.
func (g *rls) decide(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	// Validate everything before any store call: bad input consumes nothing.
	entries, hits, err := validateRLS(req, g.s.maxKey)
	if err != nil {
		return nil, err
	}
	sn := g.s.snap.Load()
	dom := sn.cfg.Domains[req.GetDomain()]
	if dom == nil {
		resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(entries))}
		for i := range entries {
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		}
		if g.s.envoy.DynamicMetadata {
			resp.DynamicMetadata = dynamicMetadata(req, nil, nil)
		}
		return resp, nil
	}
	evals, err := g.resolve(req, entries, hits, dom, sn)
	if err != nil {
		return nil, err
	}
	if err := g.decideAll(ctx, evals); err != nil {
		return nil, err
	}
	return g.render(req, dom, evals), nil
}

// validateRLS checks a request and returns each descriptor's entries and
// the request's hits_addend (1 when unset). maxKey caps the bytes of the
// domain and a descriptor's entries together: the key they make.
func validateRLS(req *rlspb.RateLimitRequest, maxKey int) ([][]config.Entry, int64, error) {
	if path := utf8Error(req); path != "" {
		return nil, 0, invalid("%s: invalid UTF-8", path)
	}
	if req.GetDomain() == "" {
		return nil, 0, invalid("domain is required")
	}
	if err := checkString("domain", req.GetDomain(), maxKey); err != nil {
		return nil, 0, err
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, 0, invalid("at least one descriptor is required")
	}
	if len(ds) > MaxDescriptors {
		return nil, 0, invalid("%d descriptors; at most %d per request", len(ds), MaxDescriptors)
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // proto3 cannot tell 0 from unset; Envoy means 1
	}
	entries := make([][]config.Entry, len(ds))
	for i, d := range ds {
		if len(d.GetEntries()) == 0 {
			return nil, 0, invalid("descriptors[%d]: at least one entry is required", i)
		}
		size := len(req.GetDomain())
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, 0, invalid("descriptors[%d].entries[%d].key: key is required", i, j)
			}
			if err := checkEntry(e, i, j, maxKey); err != nil {
				return nil, 0, err
			}
			// The store key separates entries ("/key=value"): count the two
			// separators, so every key within the cap fits the store's
			// (backend.StoreKeyBytes: three times the cap, escaped, plus 1 KiB).
			size += len(e.GetKey()) + len(e.GetValue()) + 2
			entries[i] = append(entries[i], config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if size > maxKey {
			return nil, 0, invalid("descriptors[%d]: domain and entries make a key of %d bytes; the cap is %d bytes (--max-key-bytes)", i, size, maxKey)
		}
		if d.GetIsNegativeHits() {
			return nil, 0, invalid("descriptors[%d]: is_negative_hits is not supported (a decision never refunds)", i)
		}
		if o := d.GetLimit(); o != nil {
			if _, _, err := overridePeriod(o, i); err != nil {
				return nil, 0, err
			}
		}
	}
	return entries, hits, nil
}

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
func (g *rls) resolve(req *rlspb.RateLimitRequest, entries [][]config.Entry, hits int64, dom *config.Domain, sn *snapshot) ([]evalDesc, error) {
	ds := req.GetDescriptors()
	evals := make([]evalDesc, len(ds))
	replaced := map[string]bool{}
	for i, d := range ds {
		e := &evals[i]
		e.cost = hits
		if h := d.GetHitsAddend(); h != nil {
			e.cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		path := dom.MatchPath(entries[i])
		var node *config.Descriptor
		if len(path) > 0 {
			node = path[len(path)-1]
		}
		if o := d.GetLimit(); o != nil {
			if err := g.override(e, o, node, dom, sn, i); err != nil {
				return nil, err
			}
		} else if node != nil && node.RateLimit != nil {
			g.configured(e, path, dom, sn, replaced)
		}
		if g.s.envoy.QuotaMode && !e.shadow && e.kind != kindNone && e.kind != kindUnlimited {
			// QUOTA_MODE applies to what would be OVER_LIMIT: not to a
			// shadow limit, already OK, as in envoyproxy/ratelimit.
			e.shadow, e.quota = true, true
		}
		if e.kind == kindCounted {
			e.key = envoyKey(req.GetDomain(), entries[i], e.shared)
			if e.mult > 0 {
				// An override counts on its own state, apart from the
				// configured limit of the same entries (and from other
				// override rates): limits with one algorithm and period
				// on one key would share a counter, so the stricter of
				// two would see the other's hits and one of them could
				// not be enforced at its own rate. '#' never appears
				// unescaped in envoyKey, so no entry can forge this.
				e.key += "#override=" + url.QueryEscape(e.limit.String())
			}
		}
	}
	for i := range evals {
		// An unlimited limit stays unlimited, replaced or not, as in
		// envoyproxy/ratelimit.
		if e := &evals[i]; e.rl != nil && e.rl.Name != "" && replaced[e.rl.Name] && e.mult == 0 && e.kind != kindUnlimited {
			*e = evalDesc{kind: kindNone}
		}
	}
	return evals, nil
}

// configured fills e from the rate_limit of the node a descriptor matched
// (the last of path, the node each entry matched) and notes the limits it
// replaces.
func (g *rls) configured(e *evalDesc, path []*config.Descriptor, dom *config.Domain, sn *snapshot, replaced map[string]bool) {
	node := path[len(path)-1]
	rl := node.RateLimit
	// shadow_mode wins over quota_mode: a shadow status is OK already.
	e.rl, e.shadow, e.quota, e.qcfg, e.label = rl, node.Shadow || node.QuotaMode, node.QuotaMode && !node.Shadow, node.QuotaMode, node.Path
	e.period = config.Units[rl.Unit]
	for j, n := range path {
		if n.ShareThreshold && n.Prefix {
			if e.shared == nil {
				e.shared = make([]string, len(path))
			}
			e.shared[j] = n.Value + "*"
		}
	}
	if rl.Name != "" {
		e.label = rl.Name
	}
	for _, r := range rl.Replaces {
		replaced[r] = true
	}
	switch {
	case rl.Unlimited:
		e.kind = kindUnlimited
	case rl.RequestsPerUnit == 0:
		e.kind = kindZero
	default:
		e.kind, e.limit = kindCounted, rl.Limit
		e.fp = g.s.failure(sn.cfg, rl.Failure, dom.Failure)
	}
}

// decideAll decides the counted descriptors in one step and maps a
// failure to its gRPC status.
func (g *rls) decideAll(ctx context.Context, evals []evalDesc) error {
	units := group(evals)
	if len(units) == 0 {
		return nil
	}
	zeroDenies := false // a non-shadow requests_per_unit 0 denies the request
	for i := range evals {
		zeroDenies = zeroDenies || (evals[i].kind == kindZero && !evals[i].shadow)
	}
	err := g.s.decide(ctx, units, zeroDenies)
	switch ratewarden.Classify(ctx, err) {
	case ratewarden.NoError:
		return nil
	case ratewarden.CallerCanceled:
		return status.FromContextError(ctx.Err()).Err() // CANCELED or DEADLINE_EXCEEDED
	}
	// The store's error may name addresses and the caller's values: it is
	// logged with the keys hashed, and the caller gets a fixed message.
	msg := err.Error()
	for _, u := range units {
		msg = redact(msg, u.key)
	}
	if k := ratewarden.Classify(ctx, err); k == ratewarden.StoreUnavailable || k == ratewarden.KeyState {
		g.s.log.Warn("store unavailable", "err", msg)
		return status.Error(codes.Unavailable, "the rate limit store could not decide; retry later")
	}
	g.s.log.Info("request refused by the limiter", "err", msg)
	return invalid("the request is invalid for its limits (a cost or limit the store refuses)")
}

// render builds the answer, as envoyproxy/ratelimit gives it: one status
// per descriptor, the overall code, and the headers and dynamic metadata
// the server's EnvoyCompat asks for.
func (g *rls) render(req *rlspb.RateLimitRequest, dom *config.Domain, evals []evalDesc) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(evals))}
	now := time.Now()
	var quotaOver []int // descriptors over a quota_mode limit
	for i := range evals {
		st, over := g.status(dom, &evals[i], now)
		resp.Statuses[i] = st
		switch {
		case over && evals[i].quota:
			quotaOver = append(quotaOver, i)
		case st.Code == rlspb.RateLimitResponse_OVER_LIMIT:
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if g.s.envoy.ShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OK // SHADOW_MODE: report, never deny
	}
	switch g.s.envoy.Headers {
	case RLSHeadersRatewarden:
		// No Retry-After on a request that passes, SHADOW_MODE's too.
		resp.ResponseHeadersToAdd = draftHeaders(evals, resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT)
	case RLSHeadersEnvoy:
		resp.ResponseHeadersToAdd = g.s.envoy.headers(resp.Statuses, evals, now)
	}
	if g.s.envoy.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, evals, quotaOver)
	}
	return resp
}

// status is the status of descriptor e and whether it is over its limit.
// Over the limit, limit_remaining is 0 and duration_until_reset the end
// of the limit's window, as envoyproxy/ratelimit reports them; a shadow
// limit's code is OK, and a quota_mode limit's is OK with no
// duration_until_reset.
func (g *rls) status(dom *config.Domain, e *evalDesc, now time.Time) (*rlspb.RateLimitResponse_DescriptorStatus, bool) {
	st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	over := false
	switch e.kind {
	case kindUnlimited:
		st.LimitRemaining = math.MaxUint32
		return st, false
	case kindZero:
		over = true
		st.CurrentLimit = currentLimit(e)
		st.DurationUntilReset = durationpb.New(windowReset(e.period, now))
		g.s.m.decision("grpc", dom.Name, e.label, ratewarden.Result{}, e.shadow)
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
		st.CurrentLimit = currentLimit(e)
		if !over {
			// The remaining right after this descriptor's hits, as
			// envoyproxy/ratelimit counts descriptors one by one.
			st.LimitRemaining = uint32(min(addSat(res.Remaining, e.later), math.MaxUint32))
		}
		st.DurationUntilReset = durationpb.New(resetOf(e.limit, *res, now))
		g.s.m.decision("grpc", dom.Name, e.label, *res, e.shadow)
		g.s.nearLimit(dom.Name, e, res)
	default:
		return st, false
	}
	switch {
	case !over:
	case e.quota:
		st.DurationUntilReset = nil
	case !e.shadow:
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return st, over
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

// draftHeaders are ratewarden's headers: RateLimit-Policy and RateLimit
// with one item per enforced limit (requests_per_unit 0 included),
// X-RateLimit-* for the binding one, Retry-After when over. Shadow and
// quota limits are left out unless no enforced limit applies.
func draftHeaders(evals []evalDesc, over bool) []*corepb.HeaderValue {
	var hdr, shadowHdr ratewarden.Decision
	var policies, shadowPolicies []httplimit.Policy
	seen := map[*ratewarden.Result]bool{}
	for i := range evals {
		e := &evals[i]
		var res ratewarden.Result
		switch e.kind {
		case kindCounted:
			if seen[&e.unit.res[e.idx]] {
				continue
			}
			seen[&e.unit.res[e.idx]] = true
			res = e.unit.res[e.idx]
		case kindZero:
			reset := windowReset(e.period, time.Now())
			res = ratewarden.Result{Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Period: e.period}, RetryAfter: reset, ResetAfter: reset}
		default:
			continue
		}
		p := httplimit.Policy{Name: e.label, Limit: res.Limit}
		if e.shadow {
			shadowHdr.Results, shadowPolicies = append(shadowHdr.Results, res), append(shadowPolicies, p)
		} else {
			hdr.Results, policies = append(hdr.Results, res), append(policies, p)
		}
	}
	if len(hdr.Results) == 0 {
		hdr, policies = shadowHdr, shadowPolicies
		for i := range hdr.Results {
			hdr.Results[i].Allowed = true // a shadow limit never rejects
			hdr.Results[i].RetryAfter = 0
		}
	}
	hdr.Allowed = !over
	var out []*corepb.HeaderValue
	for _, f := range httplimit.NewRenderer(httplimit.DraftHeaders|httplimit.XRateLimitHeaders, policies...).Append(nil, hdr, over) {
		// Lower case, as HTTP/2 (and Envoy) want header names.
		out = append(out, &corepb.HeaderValue{Key: strings.ToLower(f.Name), Value: f.Value})
	}
	return out
}

// override applies a descriptor's limit override, as envoyproxy/ratelimit
// does: it replaces the configured rate (the algorithm stays the matched
// node's, fixed_window otherwise) and applies even without a matching node.
func (g *rls) override(e *evalDesc, o *rlcommon.RateLimitDescriptor_RateLimitOverride, node *config.Descriptor, dom *config.Domain, sn *snapshot, i int) error {
	period, mult, err := overridePeriod(o, i)
	if err != nil {
		return err
	}
	unit := overrideUnits[o.GetUnit()]
	e.rl = &config.RateLimit{Unit: unit, RequestsPerUnit: o.GetRequestsPerUnit()}
	e.mult, e.label, e.period = mult, "override", period
	alg, failure := config.DefaultEnvoyAlgorithm, config.FailurePolicy("")
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
	e.fp = g.s.failure(sn.cfg, failure, dom.Failure)
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

func currentLimit(e *evalDesc) *rlspb.RateLimitResponse_RateLimit {
	cl := &rlspb.RateLimitResponse_RateLimit{Name: e.rl.Name, RequestsPerUnit: e.rl.RequestsPerUnit, Unit: rlsUnits[e.rl.Unit]}
	if e.mult > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(e.mult)
	}
	return cl
}

// envoyKey is the store key of a descriptor: the domain and every entry,
// each escaped so that no two descriptors share a key by accident. Each
// distinct value counts separately, as in envoyproxy/ratelimit, except an
// entry i matched by a share_threshold wildcard: its value is that
// wildcard, shared[i], after a bare '*', which no escaped value holds, so
// every value matching the wildcard counts on one key.
func envoyKey(domain string, entries []config.Entry, shared []string) string {
	var b strings.Builder
	b.WriteString("envoy/")
	b.WriteString(url.QueryEscape(domain))
	for i, e := range entries {
		b.WriteByte('/')
		b.WriteString(url.QueryEscape(e.Key))
		b.WriteByte('=')
		v := e.Value
		if i < len(shared) && shared[i] != "" {
			b.WriteByte('*')
			v = shared[i]
		}
		b.WriteString(url.QueryEscape(v))
	}
	return b.String()
}

// group turns the counted descriptors into units (store calls). The limits
// of one key with the same cost, failure policy and shadow mode form one
// atomic unit; the same limit (rate, burst, algorithm and period) on the
// same key twice counts its costs together. Descriptors with different
// limits never merge, so none loses its own rate.
func group(evals []evalDesc) []*unit {
	type slot struct {
		key    string
		fp     config.FailurePolicy
		shadow bool
		limit  ratewarden.Limit
	}
	type merged struct {
		slot
		cost  int64
		descs []int
	}
	var ms []*merged
	index := map[slot]*merged{}
	for i := range evals {
		e := &evals[i]
		if e.kind != kindCounted {
			continue
		}
		// The same limit on one key twice shares state, so it merges.
		sl := slot{key: e.key, fp: e.fp, shadow: e.shadow, limit: e.limit}
		m := index[sl]
		if m == nil {
			m = &merged{slot: sl}
			index[sl] = m
			ms = append(ms, m)
		}
		m.cost = addSat(m.cost, e.cost)
		m.descs = append(m.descs, i)
	}
	type unitKey struct {
		key    string
		fp     config.FailurePolicy
		shadow bool
		cost   int64
	}
	var units []*unit
	byKey := map[unitKey]*unit{}
	for _, m := range ms {
		uk := unitKey{m.key, m.fp, m.shadow, m.cost}
		u := byKey[uk]
		if u == nil {
			u = &unit{key: m.key, cost: m.cost, fp: m.fp, shadow: m.shadow}
			byKey[uk] = u
			units = append(units, u)
		}
		idx := len(u.limits)
		u.limits = append(u.limits, m.limit)
		if m.cost > m.limit.Capacity() {
			u.impossible = true
		}
		later := m.cost
		for _, d := range m.descs {
			later -= evals[d].cost
			evals[d].unit, evals[d].idx, evals[d].later = u, idx, max(later, 0)
		}
	}
	return units
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

var _ rlspb.RateLimitServiceServer = (*rls)(nil)
