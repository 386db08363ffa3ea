package yamlpos

import (
	"fmt"
	"sort"
	"strings"
)

// A Pos is a place in a file: the file's name as given to the Decoder, and
// a 1-based line and column.
type Pos struct {
	File   string
	Line   int
	Column int
}

// String formats p as "file:line:column", the form editors and terminals
// turn into a link. A position without a line (the file as a whole) is
// just the file name.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// An Error is one problem in a file: where it is, the path of
// the field (e.g. "policies.api.rate" or "proxy.routes[2].limits[0].key"),
// and what to change.
type Error struct {
	Pos  Pos
	Path string
	Msg  string

	// Err is the underlying error, if any (for example one wrapping
	// floodgate.ErrInvalidLimit), so callers can still use errors.Is.
	Err error
}

// Error formats e as "file:line:column: path: message".
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Path + ": " + e.Msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one load, in file order, so that one run
// of `floodgate validate` shows everything to fix, not just the first thing.
type Errors []*Error

// Error lists the errors one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Sorted orders es by file, line and column, dropping exact duplicates
// (an alias decoded twice reports its problem once).
func (es Errors) Sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	out := es[:0]
	for i, e := range es {
		if i > 0 && e.Error() == es[i-1].Error() {
			continue
		}
		out = append(out, e)
	}
	return out
}

// Suggest returns the candidate nearest to s by edit distance, or "" when
// none is near enough to be a likely typo.
func Suggest(s string, candidates []string) string {
	best, bestD := "", len(s)/2+2
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
