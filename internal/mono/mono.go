// Package mono is a monotonic clock counted from its owner's construction:
// nanoseconds since the Clock was made, read from the monotonic clock
// only, so a step of the wall clock moves nothing counted on it.
package mono

import "time"

// Clock reads the time since its base, the instant New was called. The
// zero Clock counts from the zero time.Time, which has no monotonic
// reading: make one with New.
type Clock struct{ base time.Time }

// New returns a Clock whose zero is now. Call it when its owner is built,
// not at package init: in a testing/synctest bubble time.Now reads the
// bubble's fake clock, without a monotonic reading, and a base taken
// outside the bubble would be compared with it on the wall clock.
func New() Clock { return Clock{base: time.Now()} }

// Now returns the time since the Clock's base, in nanoseconds.
func (c Clock) Now() int64 { return int64(time.Since(c.base)) }

// At returns t on the Clock: the nanoseconds from the base to t (negative
// before it). For the result to ignore the wall clock, t must carry a
// monotonic reading: time.Now's, or one derived from it by Add.
func (c Clock) At(t time.Time) int64 { return int64(t.Sub(c.base)) }
