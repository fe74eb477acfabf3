package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/service/server"
)

// hourlyConfig is a test-only domain whose limits count per hour, so a
// test's requests never straddle a window (alignWindow keeps them inside
// one hour).
const hourlyConfig = `
domain: hourly
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 20}
`

func hourlyServer(t *testing.T) rlspb.RateLimitServiceClient {
	t.Helper()
	c := rlsClient(t, start(t, memBackend(t), server.WithConfig(parseConfig(t, hourlyConfig))))
	alignWindow(t, time.Hour, time.Minute)
	return c
}

func override(rate uint32, unit typepb.RateLimitUnit, kv ...string) *rlcommon.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rate, Unit: unit}
	return d
}

// TestSameEntriesDifferentLimits: a descriptor with a limit override and
// one without, on the same entries, are each held to their own limit and
// each report their own limit and remaining.
func TestSameEntriesDifferentLimits(t *testing.T) {
	c := hourlyServer(t)
	for i := range 2 {
		r := shouldRL(t, c, "hourly", 1, desc("k", "v"), override(2, typepb.RateLimitUnit_HOUR, "k", "v"))
		wantCodes(t, "request "+string(rune('1'+i)), r, ok, ok, ok)
		s0, s1 := r.Statuses[0], r.Statuses[1]
		if s0.GetCurrentLimit().GetRequestsPerUnit() != 100 || s0.GetLimitRemaining() != uint32(99-i) {
			t.Errorf("request %d: configured status %v, want limit 100 remaining %d", i+1, s0, 99-i)
		}
		if s1.GetCurrentLimit().GetRequestsPerUnit() != 2 || s1.GetLimitRemaining() != uint32(1-i) {
			t.Errorf("request %d: override status %v, want limit 2 remaining %d", i+1, s1, 1-i)
		}
	}
	r := shouldRL(t, c, "hourly", 1, desc("k", "v"), override(2, typepb.RateLimitUnit_HOUR, "k", "v"))
	wantCodes(t, "3rd request: the override's 2/hour is spent", r, over, ok, over)
	if got := r.Statuses[0].GetLimitRemaining(); got != 98 {
		t.Errorf("configured remaining %d after a denied request, want 98 (nothing consumed)", got)
	}
	// The configured limit alone still has its own allowance.
	r = shouldRL(t, c, "hourly", 1, desc("k", "v"))
	wantCodes(t, "configured alone", r, ok, ok)
	if got := r.Statuses[0].GetLimitRemaining(); got != 97 {
		t.Errorf("configured remaining %d, want 97", got)
	}
}

// TestOverrideMultiplierOverflow: a unit_multiplier whose period overflows
// a time.Duration is refused, not wrapped around to a short period.
func TestOverrideMultiplierOverflow(t *testing.T) {
	c := hourlyServer(t)
	for _, tc := range []struct {
		unit typepb.RateLimitUnit
		mult uint32
	}{
		{typepb.RateLimitUnit_DAY, 3335999724},    // wraps to about 31 minutes
		{typepb.RateLimitUnit_DAY, 367},           // just past MaxPeriod
		{typepb.RateLimitUnit_SECOND, 4294967295}, // about 136 years
	} {
		d := override(1, tc.unit, "k", "mult")
		d.Limit.UnitMultiplier = wrapperspb.UInt32(tc.mult)
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "hourly", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unit_multiplier") {
			t.Errorf("%v × %d: %v, want InvalidArgument naming unit_multiplier", tc.unit, tc.mult, err)
		}
	}
	// The longest period that fits is accepted.
	d := override(1, typepb.RateLimitUnit_DAY, "k", "mult")
	d.Limit.UnitMultiplier = wrapperspb.UInt32(366)
	wantCodes(t, "366 days", shouldRL(t, c, "hourly", 1, d), ok, ok)
}

// TestLongUnits: week, month and year limits, configured and as
// overrides, count and report their unit; a multiplier past MaxPeriod is
// refused.
func TestLongUnits(t *testing.T) {
	cfg := parseConfig(t, `
domain: long
descriptors:
  - key: w
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: y
    rate_limit: {unit: YEAR, requests_per_unit: 1}
`)
	c := rlsClient(t, start(t, memBackend(t), server.WithConfig(cfg)))
	r := shouldRL(t, c, "long", 2, desc("w", "a"))
	wantCodes(t, "2 of 2/week", r, ok, ok)
	if u := r.Statuses[0].GetCurrentLimit().GetUnit(); u != rlspb.RateLimitResponse_RateLimit_WEEK {
		t.Errorf("unit %v, want WEEK", u)
	}
	wantCodes(t, "3rd in a week", shouldRL(t, c, "long", 1, desc("w", "a")), over, over)
	r = shouldRL(t, c, "long", 1, desc("y", "a"))
	if u := r.Statuses[0].GetCurrentLimit().GetUnit(); u != rlspb.RateLimitResponse_RateLimit_YEAR {
		t.Errorf("unit %v, want YEAR", u)
	}
	wantCodes(t, "2nd in a year", shouldRL(t, c, "long", 1, desc("y", "a")), over, over)

	m := override(1, typepb.RateLimitUnit_MONTH, "w", "b")
	m.Limit.UnitMultiplier = wrapperspb.UInt32(12)
	r = shouldRL(t, c, "long", 1, m)
	wantCodes(t, "override 1 per 12 months", r, ok, ok)
	if cl := r.Statuses[0].GetCurrentLimit(); cl.GetUnit() != rlspb.RateLimitResponse_RateLimit_MONTH || cl.GetUnitMultiplier().GetValue() != 12 {
		t.Errorf("current_limit %v", cl)
	}
	wantCodes(t, "2nd", shouldRL(t, c, "long", 1, m), over, over)
	wantCodes(t, "override 1/YEAR", shouldRL(t, c, "long", 1, override(1, typepb.RateLimitUnit_YEAR, "w", "c")), ok, ok)
	for _, d := range []*rlcommon.RateLimitDescriptor{override(1, typepb.RateLimitUnit_MONTH, "w", "d"), override(1, typepb.RateLimitUnit_YEAR, "w", "d")} {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(map[typepb.RateLimitUnit]uint32{typepb.RateLimitUnit_MONTH: 13, typepb.RateLimitUnit_YEAR: 2}[d.Limit.Unit])
		ctx, cancel := context.WithTimeout(context.Background(), requestCap)
		_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "long", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		cancel()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v × %d: %v, want InvalidArgument", d.Limit.Unit, d.Limit.UnitMultiplier.GetValue(), err)
		}
	}
}
