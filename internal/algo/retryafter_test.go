package algo

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
)

// TestSlidingWindowRetryAfterLargeValues was a bug in algo.go (found
// by TestProperties with more iterations): for large rates and periods,
// slidingFirst's estimate P − floor(budget·P/prev), computed in float64,
// could overshoot the true first instant, so RetryAfter came out too long.
// slidingFirst now computes it exactly with MulDiv.
func TestSlidingWindowRetryAfterLargeValues(t *testing.T) {
	l := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 943267085651, Period: 22363331088 * time.Millisecond}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	p := FromLimit(l)
	s := Window{Start: 2348149764240000, Curr: 896525264212, Prev: 7}
	const now, n = 2361911077194844, 344189876307
	_, o := SlidingWindow(s, now, p, n, false)
	if o.Allowed {
		t.Fatalf("admitted now: %+v", o)
	}
	if _, early := SlidingWindow(s, now+o.RetryAfter-1, p, n, false); early.Allowed {
		t.Errorf("RetryAfter %dµs, but admitted 1µs earlier", o.RetryAfter)
	}
	if _, at := SlidingWindow(s, now+o.RetryAfter, p, n, false); !at.Allowed {
		t.Errorf("RetryAfter %dµs, but denied then", o.RetryAfter)
	}
}

// TestTokenBucketRetryAfterLargeValues was the same bug in
// TokenBucket, when it computed in float64: the starting estimate
// ceil(diff − (Capacity−n)·P/Rate) could overshoot and the search only
// went up. RetryAfter is now computed exactly (bucketRetry).
func TestTokenBucketRetryAfterLargeValues(t *testing.T) {
	l := ratewarden.Limit{Algorithm: ratewarden.TokenBucket, Rate: 42816, Period: 27808098717 * time.Millisecond, Burst: 43806}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	p := FromLimit(l)
	const now, n = 2360226254992644, 37644
	tat := Bucket{T: 2375176602287614}
	_, o := TokenBucket(tat, now, p, n, false)
	if o.Allowed {
		t.Fatalf("admitted now: %+v", o)
	}
	if _, early := TokenBucket(tat, now+o.RetryAfter-1, p, n, false); early.Allowed {
		t.Errorf("RetryAfter %dµs, but admitted 1µs earlier", o.RetryAfter)
	}
	if _, at := TokenBucket(tat, now+o.RetryAfter, p, n, false); !at.Allowed {
		t.Errorf("RetryAfter %dµs, but denied then", o.RetryAfter)
	}
}
