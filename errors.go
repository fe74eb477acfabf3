package ratewarden

import "errors"

// Sentinel errors. Every error returned by this module wraps one of them
// (test with errors.Is; Classify sorts them) after short context naming
// the package and the field or operation, for example
//
//	ratewarden: rate must be > 0, got 0: ratewarden: invalid limit
var (
	// ErrInvalidLimit reports a Limit that fails Validate or ParseLimit.
	ErrInvalidLimit = errors.New("ratewarden: invalid limit")
	// ErrInvalidKey reports an empty key.
	ErrInvalidKey = errors.New("ratewarden: invalid key")
	// ErrInvalidCost reports a cost below zero or above what the limit can
	// ever admit at once (its capacity).
	ErrInvalidCost = errors.New("ratewarden: invalid cost")
	// ErrInvalidConfig reports a bad option or store configuration.
	ErrInvalidConfig = errors.New("ratewarden: invalid config")
	// ErrStoreUnavailable reports that the backing store could not decide:
	// a network error, a timeout, a Redis error reply, an open circuit
	// breaker. It is never used for "over the limit", which is a Result.
	ErrStoreUnavailable = errors.New("ratewarden: store unavailable")
)
