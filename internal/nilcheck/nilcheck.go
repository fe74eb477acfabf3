// Package nilcheck tells whether an interface value holds nothing usable:
// it is nil, or it wraps a nil pointer, map, slice, func or channel (a
// "typed nil", such as the *Store a failed constructor returns). A typed
// nil compares unequal to nil, so constructors that take an interface use
// Is to refuse it up front instead of panicking on the first call.
package nilcheck

import (
	"fmt"
	"reflect"
)

// Is reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Describe is the end of a "must not be nil" message for v: nothing for
// a nil interface, and for a typed nil the type and where it likely came
// from, e.g. " (got a nil *redisstore.Store: check the error of the
// constructor that returned it)".
func Describe(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf(" (got a nil %T: check the error of the constructor that returned it)", v)
}
