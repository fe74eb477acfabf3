package ratewarden

import (
	"strings"
	"testing"
	"time"
)

// TestEveryFaultReachable: one limit for each rule of a valid Limit,
// broken in that rule alone, gets that fault, and Validate's message
// names the field the rule is about. A rule that no limit can reach, or
// two rules with one message, would show here.
func TestEveryFaultReachable(t *testing.T) {
	ok := Limit{Rate: 10, Period: time.Second}
	cases := []struct {
		l     Limit
		want  fault
		field string
	}{
		{ok, valid, ""},
		{Limit{Algorithm: numAlgorithms, Rate: 10, Period: time.Second}, badAlgorithm, "algorithm"},
		{Limit{Rate: 0, Period: time.Second}, rateNotPositive, "rate"},
		{Limit{Algorithm: FixedWindow, Rate: MaxRate + 1, Period: time.Second}, rateTooHigh, "rate"},
		{Limit{Algorithm: SlidingLog, Rate: MaxLogRate + 1, Period: time.Second}, logRateTooHigh, "sliding_log"},
		{Limit{Rate: 10, Period: -time.Second}, periodNotPositive, "period"},
		{Limit{Rate: 10, Period: time.Microsecond}, periodTooShort, "period"},
		{Limit{Rate: 10, Period: 1500 * time.Microsecond}, periodNotWholeMs, "milliseconds"},
		{Limit{Rate: 10, Period: MaxPeriod + time.Millisecond}, periodTooLong, "period"},
		{Limit{Rate: 10, Period: time.Second, Burst: -1}, burstNegative, "burst"},
		{Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Second, Burst: 5}, burstNotBucket, "burst"},
		{Limit{Rate: 10, Period: time.Second, Burst: MaxRate + 1}, burstTooHigh, "burst"},
		{Limit{Rate: 2_000_000, Period: time.Second}, bucketTooFast, "microsecond"},
		{Limit{Rate: 1, Period: time.Hour, Burst: 24*366 + 1}, bucketRefillTooLong, "refill"},
	}
	seen := map[string]fault{}
	for _, tc := range cases {
		if got := tc.l.fault(); got != tc.want {
			t.Errorf("%+v: fault %d, want %d", tc.l, got, tc.want)
			continue
		}
		err := tc.l.Validate()
		if tc.want == valid {
			if err != nil {
				t.Errorf("%+v: %v, want valid", tc.l, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %q", tc.l, err, tc.field)
			continue
		}
		msg := tc.want.describe(tc.l)
		if f, dup := seen[msg]; dup {
			t.Errorf("faults %d and %d say the same: %q", f, tc.want, msg)
		}
		seen[msg] = tc.want
	}
	if len(seen) != int(bucketRefillTooLong) {
		t.Errorf("%d of %d faults reached", len(seen), bucketRefillTooLong)
	}
	// A refill of exactly MaxPeriod is valid.
	if l := (Limit{Rate: 1, Period: time.Hour, Burst: 24 * 366}); l.fault() != valid {
		t.Errorf("%+v: fault %d, want valid (a refill of %v)", l, l.fault(), MaxPeriod)
	}
}
