package ratewarden

import (
	"context"
	"errors"
)

// ErrorKind sorts the error of a Limiter call by what its caller should do
// about it. Classify returns it.
type ErrorKind uint8

const (
	// NoError: there was no error.
	NoError ErrorKind = iota
	// InvalidInput: the call was refused before any store was asked
	// (ErrInvalidKey, ErrInvalidLimit, ErrInvalidCost, ErrInvalidConfig),
	// and nothing changed. The caller's request is wrong: HTTP 400, gRPC
	// INVALID_ARGUMENT.
	InvalidInput
	// CallerCanceled: the caller's context ended (canceled, or past its
	// deadline) before the store answered, or it ends too soon for Wait
	// (ErrWouldExceedDeadline). The caller gave up, the store is not to
	// blame: do not count or log it as a store failure; nobody waits for
	// the answer (gRPC: status.FromContextError).
	CallerCanceled
	// StoreUnavailable: the store could not decide (ErrStoreUnavailable,
	// or an error that follows no convention, which is the store's too):
	// HTTP 503, gRPC UNAVAILABLE. Over the limit is never an error.
	StoreUnavailable
	// KeyState: the store answered, but the state it holds for this key is
	// unusable (ErrKeyState). Only this key fails; the store is healthy, so
	// it is not a store failure (a circuit breaker must not count it). The
	// request is not the caller's fault either: HTTP 503, gRPC UNAVAILABLE,
	// and an operator should look (Reset repairs the key).
	KeyState
)

var errorKindNames = [...]string{"none", "invalid_input", "caller_canceled", "store_unavailable", "key_state"}

// String returns none, invalid_input, caller_canceled, store_unavailable
// or key_state.
func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) {
		return errorKindNames[k]
	}
	return "unknown"
}

// Classify sorts err, returned by a Limiter (or Store) call made with ctx,
// in this order: nil is NoError; an error wrapping one of the input
// sentinels (ErrSettled and ErrPermitLost among them: the caller's
// misuse, nothing changed) is InvalidInput; one wrapping
// ErrKeyState is KeyState (the store's answer arrived, whatever ctx did
// since); one wrapping ErrWouldExceedDeadline, and any other error while
// ctx is done, is CallerCanceled; anything else is StoreUnavailable. A
// nil ctx counts as never done.
func Classify(ctx context.Context, err error) ErrorKind {
	switch {
	case err == nil:
		return NoError
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidLimit),
		errors.Is(err, ErrInvalidCost), errors.Is(err, ErrInvalidConfig),
		errors.Is(err, ErrSettled), errors.Is(err, ErrPermitLost):
		return InvalidInput
	case errors.Is(err, ErrKeyState):
		return KeyState
	case errors.Is(err, ErrWouldExceedDeadline), ctx != nil && ctx.Err() != nil:
		return CallerCanceled
	default:
		return StoreUnavailable
	}
}
