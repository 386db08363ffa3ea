package httplimit

import (
	"fmt"
	"strings"
)

// The names of Counts and Bodies, as configuration files write them.
var (
	countNames = [...]string{CountAll: "all", CountFailed: "failed", CountSuccessful: "successful"}
	bodyNames  = [...]string{BodyProblem: "problem", BodyJSON: "json", BodyNone: "none"}
)

// String returns the count's name: "all", "failed" or "successful".
func (c Count) String() string { return nameOf(countNames[:], int(c), "count") }

// MarshalText writes the count's name.
func (c Count) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a count's name; anything else is an error naming the
// valid ones.
func (c *Count) UnmarshalText(b []byte) error { return parseName(countNames[:], b, (*uint8)(c)) }

// String returns the body's name: "problem", "json" or "none".
func (b Body) String() string { return nameOf(bodyNames[:], int(b), "body") }

// MarshalText writes the body's name.
func (b Body) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a body's name; anything else is an error naming the
// valid ones.
func (b *Body) UnmarshalText(text []byte) error { return parseName(bodyNames[:], text, (*uint8)(b)) }

// CountNames and BodyNames are the valid names, for schemas and help.
func CountNames() []string { return append([]string(nil), countNames[:]...) }

// BodyNames lists the names of the Bodies.
func BodyNames() []string { return append([]string(nil), bodyNames[:]...) }

func nameOf(names []string, i int, what string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", what, i)
}

func parseName(names []string, b []byte, out *uint8) error {
	for i, n := range names {
		if string(b) == n {
			*out = uint8(i)
			return nil
		}
	}
	return fmt.Errorf("%q is not valid (use one of %s)", b, strings.Join(names, ", "))
}
