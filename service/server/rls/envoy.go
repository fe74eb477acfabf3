package rls

import (
	"math"
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratewarden/ratewarden"
)

// Headers chooses the response_headers_to_add of gRPC answers.
type Headers int

const (
	// HeadersRatewarden (the default) sends ratewarden's headers in
	// lower case: ratelimit-policy and ratelimit (the IETF draft), one
	// item per enforced limit, x-ratelimit-limit, -remaining and -reset
	// for the binding one, and retry-after when over the limit.
	HeadersRatewarden Headers = iota
	// HeadersEnvoy sends what envoyproxy/ratelimit sends with
	// LIMIT_RESPONSE_HEADERS_ENABLED=true: RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (names as EnvoyCompat
	// gives them) of one descriptor: the last one over its limit, else
	// the one with the fewest remaining.
	HeadersEnvoy
	// HeadersNone sends no headers: envoyproxy/ratelimit's default.
	HeadersNone
)

// The header names of HeadersEnvoy when EnvoyCompat names none:
// envoyproxy/ratelimit's defaults.
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// EnvoyCompat holds the settings of envoyproxy/ratelimit's environment
// that change its gRPC answers and config loading, for a migration that
// keeps them. The zero EnvoyCompat is ratewarden's default.
type EnvoyCompat struct {
	// Headers chooses the response headers (LIMIT_RESPONSE_HEADERS_ENABLED).
	Headers Headers
	// LimitHeader, RemainingHeader and ResetHeader name HeadersEnvoy's
	// headers (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
	// LIMIT_RESET_HEADER); empty means the default name.
	LimitHeader, RemainingHeader, ResetHeader string
	// DynamicMetadata adds the request's domain, descriptors and hits and
	// the quota_mode violations to each answer's dynamic_metadata
	// (RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// ShadowMode makes every answer's overall code OK; statuses still say
	// OVER_LIMIT (SHADOW_MODE).
	ShadowMode bool
	// QuotaMode answers every limit as quota_mode (QUOTA_MODE).
	QuotaMode bool
	// MergeDomains merges config documents of one domain
	// (MERGE_DOMAIN_CONFIG): config.Loader.MergeDomains for the files
	// the server loads.
	MergeDomains bool
}

// nearLimit counts the allowed hits of e past its near-limit threshold:
// the hits taking the count from at least floor(rate × ratio) towards the
// rate, as envoyproxy/ratelimit counts near_limit. Denied hits consume
// nothing here, so they count neither.
func (g *Service) nearLimit(domain string, e *evalDesc, res *ratewarden.Result) {
	if !res.Allowed || e.cost <= 0 || e.limit.Rate <= 0 {
		return
	}
	rate := e.limit.Rate
	if e.limit.Burst > 0 {
		rate = e.limit.Burst
	}
	after := rate - addSat(res.Remaining, e.later)
	before := after - e.cost
	threshold := int64(math.Floor(float64(rate) * g.nearRatio))
	switch {
	case after <= threshold:
	case e.node != nil:
		e.node.series.NearLimit(g.m, after-max(threshold, before))
	default:
		g.m.NearLimit.WithLabelValues("grpc", domain, e.label).Add(float64(after - max(threshold, before)))
	}
}

// headers are HeadersEnvoy's headers for the statuses of an answer:
// those of the last status over its limit that is not in quota mode, else
// of the status with a limit and the fewest remaining (the first of
// equals), as envoyproxy/ratelimit picks it. Reset is the window's end in
// seconds.
func (c EnvoyCompat) headers(sts []*rlspb.RateLimitResponse_DescriptorStatus, evals []evalDesc, now time.Time) []*corepb.HeaderValue {
	pick, least := -1, uint32(math.MaxUint32)
	for i, st := range sts {
		switch {
		case st.GetCurrentLimit() == nil:
		case st.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT:
			pick, least = i, 0
		case st.GetLimitRemaining() < least:
			pick, least = i, st.GetLimitRemaining()
		}
	}
	if pick < 0 {
		return nil
	}
	st := sts[pick]
	var hv [3]corepb.HeaderValue
	hv[0].Key, hv[0].Value = nameOr(c.LimitHeader, DefaultLimitHeader), strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)
	hv[1].Key, hv[1].Value = nameOr(c.RemainingHeader, DefaultRemainingHeader), strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)
	hv[2].Key, hv[2].Value = nameOr(c.ResetHeader, DefaultResetHeader), strconv.FormatInt(int64(windowReset(evals[pick].period, now)/time.Second), 10)
	return []*corepb.HeaderValue{&hv[0], &hv[1], &hv[2]}
}

func nameOr(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// dynamicMetadata is the dynamic_metadata of an answer, with the fields
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA gives: domain,
// descriptors (each with its entries as "key=value", its limit override
// in protobuf text form and its hits_addend), hitsAddend,
// quotaModeViolations (the indexes of descriptors over a quota_mode
// limit) and quotaModeEnabled.
func dynamicMetadata(req *rlspb.RateLimitRequest, evals []evalDesc, quotaOver []int) *structpb.Struct {
	f := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	var descs []*structpb.Value
	for _, d := range req.GetDescriptors() {
		var entries []*structpb.Value
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			df["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	f["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if len(quotaOver) > 0 {
		var vs []*structpb.Value
		for _, i := range quotaOver {
			vs = append(vs, structpb.NewNumberValue(float64(i)))
		}
		f["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	enabled := false
	for i := range evals {
		enabled = enabled || (evals[i].qcfg && evals[i].kind != kindNone && evals[i].kind != kindUnlimited)
	}
	f["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: f}
}
