package ratewarden

import "time"

// Source tells which part of the stack produced a Result. The zero value,
// SourceStore, means the shared store decided.
type Source uint8

const (
	// SourceStore: the store the Limiter was built on decided (for a
	// Redis-backed Limiter: Redis, the one shared source of truth).
	SourceStore Source = iota
	// SourceCache: a local cache answered with a decision the store had
	// already made (an exact deny cache). Not degraded.
	SourceCache
	// SourceLease: admitted locally from capacity this replica reserved
	// in the shared store beforehand (redisstore's lease mode). Exact, not
	// degraded.
	SourceLease
	// SourceFailOpen: the store was unavailable and the failure policy
	// allowed the request. Degraded.
	SourceFailOpen
	// SourceFailClosed: the store was unavailable and the failure policy
	// denied the request. Degraded.
	SourceFailClosed
	// SourceLocalFallback: the store was unavailable and an in-process
	// limiter holding this replica's share of the limit decided. Degraded.
	SourceLocalFallback
)

var sourceNames = [...]string{"store", "cache", "lease", "fail_open", "fail_closed", "local_fallback"}

// String returns store, cache, lease, fail_open, fail_closed or
// local_fallback.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// Degraded reports whether the decision was made without the shared store.
func (s Source) Degraded() bool { return s >= SourceFailOpen }

// Result is the outcome of a check against one Limit.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the limit that was checked.
	Limit Limit
	// Remaining is the number of units that could still be admitted right
	// now after this decision. Never negative.
	Remaining int64
	// RetryAfter is zero when Allowed; otherwise the time after which the
	// same request can be admitted, if nothing else consumes meanwhile.
	RetryAfter time.Duration
	// ResetAfter is the time after which the limit is back to its full
	// allowance if nothing else consumes meanwhile. Zero when it already is.
	ResetAfter time.Duration
	// Delay is zero but for a reservation admitted ahead of time (a check
	// with Request.MaxDelay, as Limiter.Wait makes): how long after the
	// decision the admitted units may be used.
	Delay time.Duration
	// Source tells who decided; see Source.Degraded.
	Source Source
}

// Degraded reports whether the decision was made without the shared store
// (by a failure policy).
func (r Result) Degraded() bool { return r.Source.Degraded() }

// Decision is the outcome of a multi-limit check (Limiter.AllowAll).
type Decision struct {
	// Allowed is true when every limit admitted the request; only then was
	// anything consumed.
	Allowed bool
	// Results holds one Result per limit, in the order they were given.
	Results []Result
}

// Binding returns the Result that bounds the caller most: when denied, the
// denying limit with the longest RetryAfter; when allowed, the limit with the
// fewest Remaining (ties: the first). It returns the zero Result when
// Results is empty.
func (d Decision) Binding() Result {
	if len(d.Results) == 0 {
		return Result{}
	}
	best := d.Results[0]
	for _, r := range d.Results[1:] {
		switch {
		case !d.Allowed && !r.Allowed && (best.Allowed || r.RetryAfter > best.RetryAfter):
			best = r
		case d.Allowed && r.Remaining < best.Remaining:
			best = r
		}
	}
	return best
}
