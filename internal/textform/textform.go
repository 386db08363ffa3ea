// Package textform is how configuration spells limits: periods ("min",
// "30s") and algorithm names ("sliding_window"). The root package formats
// a Limit with it; config and envoyrules parse with it.
package textform

import (
	"strconv"
	"strings"
	"time"
)

// Algorithms are the configuration names of floodgate.Algorithm's values,
// indexed by the value: Algorithms[floodgate.SlidingWindow] is
// "sliding_window".
var Algorithms = [...]string{"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log"}

// AlgorithmNames returns a copy of Algorithms, for error messages that
// list what is accepted.
func AlgorithmNames() []string { return append([]string(nil), Algorithms[:]...) }

// Algorithm returns the index in Algorithms of the name s (case, dashes
// and surrounding space do not matter), and false when s names none.
func Algorithm(s string) (int, bool) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for i, name := range Algorithms {
		if norm == name {
			return i, true
		}
	}
	return 0, false
}

// Period writes a period as configuration does: "s", "min", "h" and "d"
// for one unit, else a count and a unit ("30s", "15min", "2h", "7d"), else
// Go's duration syntax ("1.5s").
func Period(d time.Duration) string {
	units := []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "min"}, {time.Second, "s"}}
	for _, u := range units {
		if d > 0 && d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}
