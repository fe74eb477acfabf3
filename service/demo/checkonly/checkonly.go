// Package checkonly completes a ratewarden.Store that only checks and
// resets (the demo's naive counter, its client of a ratewarden service):
// embedded in it, Rest answers Charge, Acquire, Release and Extend with an
// error wrapping errors.ErrUnsupported, which the Limiter passes on.
package checkonly

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden"
)

// Rest is the part of a ratewarden.Store its embedder does not do. The
// zero Rest is ready to use.
type Rest struct{}

func unsupported(op string) error {
	return fmt.Errorf("checkonly: %s: this store only checks and resets: %w", op, errors.ErrUnsupported)
}

// Charge returns an error wrapping errors.ErrUnsupported.
func (Rest) Charge(context.Context, string, []ratewarden.Limit, []ratewarden.Spent, []int64) error {
	return unsupported("charge")
}

// Acquire returns an error wrapping errors.ErrUnsupported.
func (Rest) Acquire(context.Context, string, string, int64, time.Duration) (ratewarden.PermitResult, error) {
	return ratewarden.PermitResult{}, unsupported("acquire")
}

// Release returns an error wrapping errors.ErrUnsupported.
func (Rest) Release(context.Context, string, string) (bool, error) {
	return false, unsupported("release")
}

// Extend returns an error wrapping errors.ErrUnsupported.
func (Rest) Extend(context.Context, string, string, time.Duration) (bool, error) {
	return false, unsupported("extend")
}
