package yamlpos

import (
	"fmt"
	"io"
	"os"
)

// Bounds on a file, checked by a scan of its bytes before the YAML parser
// sees them. The parser (goccy/go-yaml) needs memory that grows with the
// square of the nesting depth and of the number of fields in one block
// mapping, and about a kilobyte for every value: a 300 KB file of nested
// brackets took gigabytes. The bounds admit an Envoy rule file of 30,000
// descriptors (about 3 MB, 210,000 values) and an overrides mapping of
// 4,000 keys written one a line; parsing the largest file they admit takes
// a few hundred megabytes for a moment, growing linearly with the file,
// never with a square.
const (
	// MaxFileBytes is the largest file read.
	MaxFileBytes = 4 << 20

	// MaxNesting is how deeply collections may nest: flow [ and {, and
	// block mappings and sequences (each indentation level, each "- ").
	MaxNesting = 64

	// MaxValues is how many values (keys, scalars, aliases, collections)
	// a file may hold.
	MaxValues = 250_000

	// MaxBlockFields is how many fields one block mapping (one field per
	// line) may hold; a flow mapping ({a: 1, b: 2}) is bound by MaxValues
	// only.
	MaxBlockFields = 4_000
)

// ReadFile reads the file at path, at most MaxFileBytes and one byte
// more: enough for Parse to report a file that is too large, without
// reading all of a huge one.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f)
}

// ReadAll is ReadFile for a reader (standard input).
func ReadAll(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
}

// CheckBounds scans data for what the parser could not take within the
// bounds above, and returns an Error at the line and column where a bound
// is crossed, or nil. It reads YAML's layout only (indentation, flow
// brackets, quotes, comments, block scalars), in one pass and without
// allocating per value; what it lets through may still be invalid YAML,
// which the parser reports.
func CheckBounds(file string, data []byte) *Error {
	s := boundScan{file: file, data: data, bsIndent: -1}
	if len(data) > MaxFileBytes {
		s.data = data[:MaxFileBytes]
		s.line = 1
		for _, c := range s.data {
			if c == '\n' {
				s.line++
			}
		}
		return s.errAt(1, "the file is larger than %d bytes (%d KiB); a configuration file is a few kilobytes: check that this is the file meant", MaxFileBytes, MaxFileBytes>>10)
	}
	return s.scan()
}

// A boundFrame is one open block collection: its indentation and, for a
// mapping, its fields so far.
type boundFrame struct {
	indent int
	fields int
}

type boundScan struct {
	file   string
	data   []byte
	line   int    // 1-based line of l
	l      []byte // the current line, without its end
	frames []boundFrame
	flow   int  // open flow collections
	quote  byte // the quote of a scalar still open at the end of a line
	values int

	// bsIndent is, inside a block scalar (| or >), the indentation its
	// lines are deeper than; -1 outside one, -2 for one at the top level
	// (every line is its content).
	bsIndent int
}

func (s *boundScan) errAt(col int, format string, args ...any) *Error {
	return &Error{Pos: Pos{File: s.file, Line: s.line, Column: col}, Msg: fmt.Sprintf(format, args...)}
}

func (s *boundScan) scan() *Error {
	rest := s.data
	for len(rest) > 0 {
		s.line++
		s.l = rest
		if i := indexByte(rest, '\n'); i >= 0 {
			s.l, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if n := len(s.l); n > 0 && s.l[n-1] == '\r' {
			s.l = s.l[:n-1]
		}
		if err := s.scanLine(); err != nil {
			return err
		}
	}
	return nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// skipBlanks returns the position of the first byte at or after i that is
// not a space or a tab.
func (s *boundScan) skipBlanks(i int) int {
	for i < len(s.l) && isBlank(s.l[i]) {
		i++
	}
	return i
}

func (s *boundScan) scanLine() *Error {
	indent := 0
	for indent < len(s.l) && s.l[indent] == ' ' {
		indent++
	}
	blank := s.skipBlanks(indent) == len(s.l)
	if s.bsIndent != -1 {
		if blank || s.bsIndent == -2 || indent > s.bsIndent {
			return nil // the block scalar's text
		}
		s.bsIndent = -1
	}
	i := 0
	if s.quote != 0 {
		var closed bool
		if i, closed = s.skipQuoted(0, s.quote); !closed {
			return nil
		}
		s.quote = 0
		if s.flow > 0 {
			return s.scanFlow(i)
		}
		return s.afterBlockValue(i, indent)
	}
	if s.flow > 0 {
		// Inside a flow collection indentation means nothing: read on
		// until it closes.
		return s.scanFlow(0)
	}
	if blank || s.l[indent] == '#' {
		return nil
	}
	if indent == 0 && (hasPrefix(s.l, "---") || hasPrefix(s.l, "...")) && (len(s.l) == 3 || isBlank(s.l[3])) {
		s.frames = s.frames[:0]
		return s.node(3, -1)
	}
	if indent == 0 && s.l[0] == '%' {
		return nil // a directive
	}
	for len(s.frames) > 0 && s.frames[len(s.frames)-1].indent > indent {
		s.frames = s.frames[:len(s.frames)-1]
	}
	return s.node(indent, indent)
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

// frameIndent is the indentation of the innermost open block collection,
// -1 at the top level.
func (s *boundScan) frameIndent() int {
	if len(s.frames) == 0 {
		return -1
	}
	return s.frames[len(s.frames)-1].indent
}

// enter makes col the innermost open block collection (opening one when
// the innermost is shallower) and returns it.
func (s *boundScan) enter(col int) (*boundFrame, *Error) {
	if n := len(s.frames); n > 0 && s.frames[n-1].indent == col {
		return &s.frames[n-1], nil
	}
	s.frames = append(s.frames, boundFrame{indent: col})
	if err := s.checkNesting(col); err != nil {
		return nil, err
	}
	return &s.frames[len(s.frames)-1], nil
}

func (s *boundScan) checkNesting(col int) *Error {
	if len(s.frames)+s.flow > MaxNesting {
		return s.errAt(col+1, "nested more than %d levels deep; a configuration is a handful of levels deep", MaxNesting)
	}
	return nil
}

func (s *boundScan) value(col int) *Error {
	if s.values++; s.values > MaxValues {
		return s.errAt(col+1, "the file holds more than %d values; a configuration holds far fewer: check that this is the file meant", MaxValues)
	}
	return nil
}

// node reads block content that starts a node at i; col is the column
// the line's content starts at (-1 after a document marker).
func (s *boundScan) node(i, col int) *Error {
	for {
		i = s.skipBlanks(i)
		if i >= len(s.l) {
			return nil
		}
		c := s.l[i]
		next := byte(' ')
		if i+1 < len(s.l) {
			next = s.l[i+1]
		}
		switch {
		case c == '#' && (i == 0 || isBlank(s.l[i-1])):
			return nil
		case (c == '-' || c == '?') && isBlank(next):
			// A sequence entry, or a complex key: a collection at this
			// column, holding the node that follows.
			if _, err := s.enter(i); err != nil {
				return err
			}
			if err := s.value(i); err != nil {
				return err
			}
			i++
		case c == '-' && i+1 == len(s.l):
			if _, err := s.enter(i); err != nil {
				return err
			}
			return s.value(i)
		case c == '&' || c == '!':
			for i < len(s.l) && !isBlank(s.l[i]) {
				i++
			}
		case c == '[' || c == '{':
			return s.scanFlow(i)
		case c == '|' || c == '>':
			s.bsIndent = s.frameIndent()
			if s.bsIndent < 0 {
				s.bsIndent = -2
			}
			return s.value(i)
		case c == '"' || c == '\'':
			if err := s.value(i); err != nil {
				return err
			}
			end, closed := s.skipQuoted(i+1, c)
			if !closed {
				s.quote = c
				return nil
			}
			if k, ok := s.keyEnd(end); ok {
				if err := s.field(i); err != nil {
					return err
				}
				i = k
				continue
			}
			return s.afterBlockValue(end, i)
		default:
			// A plain scalar, or a key: up to ": ", " #" or the line's end.
			if err := s.value(i); err != nil {
				return err
			}
			start := i
			for i < len(s.l) {
				if s.l[i] == ':' && (i+1 == len(s.l) || isBlank(s.l[i+1])) {
					break
				}
				if s.l[i] == '#' && isBlank(s.l[i-1]) {
					return nil
				}
				i++
			}
			if i == len(s.l) {
				return nil
			}
			if err := s.field(start); err != nil {
				return err
			}
			i++
		}
	}
}

// keyEnd reports whether a ':' that makes the scalar before i a key
// follows, and where the value after it starts.
func (s *boundScan) keyEnd(i int) (int, bool) {
	i = s.skipBlanks(i)
	if i < len(s.l) && s.l[i] == ':' && (i+1 == len(s.l) || isBlank(s.l[i+1])) {
		return i + 1, true
	}
	return i, false
}

// field counts a block mapping's field whose key starts at col.
func (s *boundScan) field(col int) *Error {
	f, err := s.enter(col)
	if err != nil {
		return err
	}
	if f.fields++; f.fields > MaxBlockFields {
		return s.errAt(col+1, "this mapping holds more than %d fields, one a line; write a longer one as a flow mapping ({name: value, …}), which the parser reads in linear time", MaxBlockFields)
	}
	return nil
}

// afterBlockValue reads what follows a quoted scalar in block content: a
// comment, or what the parser will report.
func (s *boundScan) afterBlockValue(i, col int) *Error {
	i = s.skipBlanks(i)
	if i < len(s.l) && s.l[i] != '#' {
		return s.node(i, col)
	}
	return nil
}

// skipQuoted returns the position after the closing quote of a scalar
// whose text starts at i, and whether the quote closes on this line.
func (s *boundScan) skipQuoted(i int, q byte) (int, bool) {
	for i < len(s.l) {
		c := s.l[i]
		switch {
		case q == '"' && c == '\\':
			i += 2
			continue
		case c == q && q == '\'' && i+1 < len(s.l) && s.l[i+1] == '\'':
			i += 2
			continue
		case c == q:
			return i + 1, true
		}
		i++
	}
	return i, false
}

// scanFlow reads flow content ([a, {b: c}]) from i to the line's end.
func (s *boundScan) scanFlow(i int) *Error {
	for i < len(s.l) {
		c := s.l[i]
		switch {
		case isBlank(c) || c == ',':
			i++
		case c == '#' && (i == 0 || isBlank(s.l[i-1])):
			return nil
		case c == '[' || c == '{':
			s.flow++
			if err := s.checkNesting(i); err != nil {
				return err
			}
			if err := s.value(i); err != nil {
				return err
			}
			i++
		case c == ']' || c == '}':
			if s.flow > 0 {
				s.flow--
			}
			i++
			if s.flow == 0 {
				return s.afterBlockValue(i, i)
			}
		case (c == ':' || c == '?') && (i+1 == len(s.l) || isBlank(s.l[i+1]) || isFlowIndicator(s.l[i+1])):
			i++
		case c == '&' || c == '!':
			for i < len(s.l) && !isBlank(s.l[i]) && !isFlowIndicator(s.l[i]) {
				i++
			}
		case c == '"' || c == '\'':
			if err := s.value(i); err != nil {
				return err
			}
			end, closed := s.skipQuoted(i+1, c)
			if !closed {
				s.quote = c
				return nil
			}
			i = end
		default:
			if err := s.value(i); err != nil {
				return err
			}
			for i < len(s.l) && !isFlowIndicator(s.l[i]) {
				if s.l[i] == ':' && (i+1 == len(s.l) || isBlank(s.l[i+1])) {
					break
				}
				if s.l[i] == '#' && isBlank(s.l[i-1]) {
					return nil
				}
				i++
			}
		}
	}
	return nil
}

func isFlowIndicator(c byte) bool { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}' }
