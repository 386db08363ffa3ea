// Package isnil tells whether an interface value holds nothing, or a nil
// pointer, map, slice, channel or function of some type: a typed nil, which
// compares unequal to nil and panics at its first use.
package isnil

import "reflect"

// Value reports whether v is nil or holds a nil of a type that can be nil.
// Constructors that take a store or a limiter check it, so that a typed nil
// a program passed by mistake (a *Store variable never assigned) is refused
// with an error, not a panic at the first request.
func Value(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
