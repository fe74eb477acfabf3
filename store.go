package ratewarden

import "context"

// Request is one check handed to a Store: Cost units against every one of
// Limits for Key, decided all-or-nothing.
//
// The Limiter validates a Request before a Store sees it, so a Store may
// assume: Key is non-empty, Limits has at least one element and every Limit
// is valid, and 0 <= Cost <= every limit's Capacity.
type Request struct {
	Key    string
	Limits []Limit
	// Cost is the number of units the request consumes. A cost of 0
	// consumes nothing and reports the current state.
	Cost int64
	// Peek asks for the decision a Cost would get now, without consuming.
	Peek bool
}

// Store is the seam every backend implements: memstore (in process),
// redisstore (Redis), and decorators that wrap another Store (fallback,
// deny cache, metrics).
//
// Implementations must be safe for concurrent use and must not retain req or
// res after a call returns.
type Store interface {
	// Check decides req atomically and writes one Result per limit into
	// res, which has len(req.Limits) elements, in the order of req.Limits.
	// The request is admitted only when every limit admits it; otherwise
	// nothing is consumed from any limit. Each Result's Allowed reports that
	// limit's own verdict; Remaining is what is left after the check (before
	// it, when the request as a whole was denied or Peek is set).
	//
	// Over the limit is a Result, not an error. Errors are backend failures
	// (wrapping ErrStoreUnavailable) or input the store cannot represent.
	Check(ctx context.Context, req *Request, res []Result) error

	// Reset deletes the state of key under each of limits, so the next
	// check starts from a full allowance. Other limits of key and other keys
	// are untouched.
	Reset(ctx context.Context, key string, limits ...Limit) error
}
