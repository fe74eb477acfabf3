package ratewarden

import "errors"

// Sentinel errors. Every error returned by this module wraps one of them
// (test with errors.Is; Classify sorts them) at its end, after the package
// and the field or operation, laid out "pkg: detail: sentinel", for example
//
//	ratewarden: rate must be > 0, got 0: invalid limit
var (
	// ErrInvalidLimit reports a Limit that fails Validate or ParseLimit.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidKey reports an empty key, or one longer than a store can
	// hold (memstore.WithMaxKeyBytes).
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidCost reports a cost below zero or above what the limit can
	// ever admit at once (its capacity).
	ErrInvalidCost = errors.New("invalid cost")
	// ErrInvalidConfig reports a bad option or store configuration.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrStoreUnavailable reports that the backing store could not decide:
	// a network error, a timeout, a Redis error reply, an open circuit
	// breaker. It is never used for "over the limit", which is a Result.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrKeyState reports that the store answered but the state it holds
	// for this request's key is unusable: another type or a malformed value
	// under the key (another program writing under the prefix, a corrupted
	// value). Only this key is affected; the store itself is healthy, so it
	// never wraps ErrStoreUnavailable and never counts as a store failure.
	// Reset repairs the key. The error never names the key.
	ErrKeyState = errors.New("unusable key state")
	// ErrWouldExceedDeadline reports that Limiter.Wait could admit the
	// units only after its context's deadline: it returned at once and
	// consumed nothing. Classify sorts it as CallerCanceled.
	ErrWouldExceedDeadline = errors.New("would exceed context deadline")
	// ErrPermitLost reports that a concurrency permit (Limiter.Acquire) is
	// no longer held: it expired before Permit.Extend, and may already be
	// another holder's.
	ErrPermitLost = errors.New("permit lost")
	// ErrSettled reports a second Settle (or Cancel) of one Reservation.
	ErrSettled = errors.New("reservation already settled")
)
