package server_test

import (
	"math"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestHugeHitsAddendSaturates: descriptors on one key whose hits_addend
// sum past int64 are over the limit, not an invalid negative cost.
func TestHugeHitsAddendSaturates(t *testing.T) {
	c := hourlyServer(t)
	big := func() *rlcommon.RateLimitDescriptor {
		d := desc("k", "huge")
		d.HitsAddend = wrapperspb.UInt64(1 << 63)
		return d
	}
	r := shouldRL(t, c, "hourly", 1, big(), big())
	wantCodes(t, "2 × 2^63 hits", r, over, over, over)
	if got := r.Statuses[0].GetLimitRemaining(); got != 0 {
		t.Errorf("remaining %d, want 0 (over the limit, as envoyproxy/ratelimit says)", got)
	}
	d := desc("k", "huge")
	d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	wantCodes(t, "2^64-1 and 1 hits", shouldRL(t, c, "hourly", 1, d, desc("k", "huge")), over, over, over)
	wantCodes(t, "still full", shouldRL(t, c, "hourly", 100, desc("k", "huge")), ok, ok)
}
