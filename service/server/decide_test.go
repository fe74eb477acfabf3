package server_test

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/service/server"
)

const policiesConfig = `
domain: mixed
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5, failure_policy: fail_open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 1, failure_policy: fail_closed}
  - key: watched
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestDescriptorsOfSeveralFailurePolicies: descriptors whose limits have
// different failure policies (each decided through its own Limiter) are
// still one decision: a denial by one consumes nothing from the others,
// and the store metrics name each failure policy.
func TestDescriptorsOfSeveralFailurePolicies(t *testing.T) {
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, policiesConfig)))
	c := rlsClient(t, s)
	alignWindow(t, time.Hour, time.Minute)
	wantCodes(t, "first", shouldRL(t, c, "mixed", 1, desc("open", "x"), desc("closed", "x")), ok, ok, ok)
	r := shouldRL(t, c, "mixed", 1, desc("open", "x"), desc("closed", "x"))
	wantCodes(t, "second: closed is spent", r, over, ok, over)
	if got := r.Statuses[0].GetLimitRemaining(); got != 4 {
		t.Errorf("open remaining %d after a denied request, want 4 (nothing consumed)", got)
	}
	for _, fp := range []string{"fail_open", "fail_closed"} {
		for _, op := range []string{"peek", "check"} {
			if got := metric(t, s, "ratewarden_store_duration_seconds_count", `op="`+op+`"`, `failure_policy="`+fp+`"`); got == 0 {
				t.Errorf("no %s store calls timed for %s", op, fp)
			}
		}
	}
	if got := metric(t, s, "ratewarden_store_errors_total"); got != 0 {
		t.Errorf("store errors %v", got)
	}
}

// TestShadowHitsAboveTheLimit: a shadow descriptor whose hits_addend is
// more than its limit can ever admit is OK with 0 remaining (as
// envoyproxy/ratelimit reports shadow limits) without denying the
// request; the other descriptor is consumed, the shadow one is not.
func TestShadowHitsAboveTheLimit(t *testing.T) {
	c := rlsClient(t, start(t, memBackend(t), server.WithConfig(parseConfig(t, policiesConfig))))
	alignWindow(t, time.Hour, time.Minute)
	huge := func() *rlcommon.RateLimitDescriptor {
		d := desc("watched", "x")
		d.HitsAddend = wrapperspb.UInt64(3)
		return d
	}
	r := shouldRL(t, c, "mixed", 1, desc("open", "y"), huge())
	wantCodes(t, "3 hits on a shadow 2/hour", r, ok, ok, ok)
	if open, watched := r.Statuses[0].GetLimitRemaining(), r.Statuses[1].GetLimitRemaining(); open != 4 || watched != 0 {
		t.Errorf("remaining open %d, watched %d; want 4 (consumed) and 0 (over)", open, watched)
	}
	r = shouldRL(t, c, "mixed", 1, desc("watched", "x"))
	wantCodes(t, "then one hit", r, ok, ok)
	if got := r.Statuses[0].GetLimitRemaining(); got != 1 {
		t.Errorf("watched remaining %d, want 1", got)
	}
}
