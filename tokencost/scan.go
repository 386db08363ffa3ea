package tokencost

// The scanners read a JSON document and a server-sent event stream a byte
// at a time and keep only what the paths they look for need: the keys of
// the objects on the way down (a few bytes each, and only as deep as the
// longest path) and the literal of a value at a path. A string, an array
// or an object of any size passes through in constant memory, so a body
// is never buffered and a stream reaches its client as it comes.

// maxDepth bounds the nesting of a document; a deeper one is not read
// (its values count as not reported).
const maxDepth = 128

// maxPathDepth bounds the keys of a path; maxKey the bytes of one key
// compared with a path's; maxLit the bytes of a value kept (a count has at
// most 19 digits, a model name is short).
const (
	maxPathDepth = 8
	maxKey       = 64
	maxLit       = 128
)

// A path is a JSON path to match: the keys from the document's root, each
// through an object. Arrays never match.
type path struct {
	keys []string
	slot int // which of the scanner's values it fills
}

// The kinds of a value found at a path.
const (
	litNone   = iota // nothing found
	litNumber        // a JSON number, as written
	litString        // a JSON string's contents, escapes as written
	litOther         // true, false, null, an object, an array, or too long
)

// lit is a value found at a path.
type lit struct {
	kind uint8
	n    uint8
	b    [maxLit]byte
}

func (l *lit) text() string { return string(l.b[:l.n]) }

// The states of jsonScan.
const (
	jValue      = iota // a value is expected
	jValueOrEnd        // after '[': a value or ']'
	jKeyOrEnd          // after '{': a key or '}'
	jKey               // after ',' in an object: a key
	jColon             // after a key
	jAfter             // after a value: ',', a closing bracket, or the end
	jString            // in a string (a key when inKey)
	jEscape            // after a backslash in a string
	jNumber            // in a number
	jLiteral           // in true, false or null
	jDone              // the document is complete
	jError             // not JSON (or deeper than maxDepth): nothing more is read
)

// jsonScan finds the values of paths in one JSON document. Values are
// pending until the document is complete; a document that is not JSON
// reports nothing.
type jsonScan struct {
	paths   []path
	pending []lit // per slot, the values of this document
	state   uint8
	inKey   bool
	depth   int
	kind    [maxDepth + 1]bool // per level: true for an object
	keys    [maxPathDepth][maxKey]byte
	keyLen  [maxPathDepth]uint8 // maxKey+1: too long to match
	capture int                 // the slot a value is captured to, -1 for none
}

func (s *jsonScan) init(paths []path, slots int) {
	s.paths = paths
	s.pending = make([]lit, slots)
	s.reset()
}

// reset starts a new document.
func (s *jsonScan) reset() {
	s.state, s.inKey, s.depth, s.capture = jValue, false, 0, -1
	clear(s.pending)
}

// matching returns the slot of the path the value about to start sits at,
// or -1.
func (s *jsonScan) matching() int {
	if s.depth == 0 || s.depth > maxPathDepth {
		return -1
	}
	for i := 1; i <= s.depth; i++ {
		if !s.kind[i] {
			return -1 // inside an array
		}
	}
next:
	for _, p := range s.paths {
		if len(p.keys) != s.depth {
			continue
		}
		for i, k := range p.keys {
			n := int(s.keyLen[i])
			if n > maxKey || n != len(k) || string(s.keys[i][:n]) != k {
				continue next
			}
		}
		return p.slot
	}
	return -1
}

// write scans p.
func (s *jsonScan) write(p []byte) {
	for _, b := range p {
		if s.state == jError {
			return
		}
		s.feed(b)
	}
}

// feed scans b.
func (s *jsonScan) feed(b byte) {
	switch s.state {
	case jError:
	case jDone:
		if !isSpace(b) {
			s.fail()
		}
	default:
		s.step(b)
	}
}

func (s *jsonScan) fail() {
	s.state = jError
	clear(s.pending)
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (s *jsonScan) step(b byte) {
	switch s.state {
	case jString:
		switch {
		case b == '\\':
			s.state = jEscape
		case b == '"':
			s.endString()
			return
		case b < 0x20:
			s.fail()
			return
		}
		s.keep(b)
		return
	case jEscape:
		s.state = jString
		s.keep(b)
		return
	case jNumber:
		if (b >= '0' && b <= '9') || b == '.' || b == 'e' || b == 'E' || b == '+' || b == '-' {
			s.keep(b)
			return
		}
		s.endScalar()
		s.step(b)
		return
	case jLiteral:
		if b >= 'a' && b <= 'z' {
			return
		}
		s.endScalar()
		s.step(b)
		return
	}
	if isSpace(b) {
		return
	}
	switch s.state {
	case jValueOrEnd:
		if b == ']' {
			s.pop()
			return
		}
		s.value(b)
	case jValue:
		s.value(b)
	case jKeyOrEnd, jKey:
		switch {
		case b == '"':
			s.state, s.inKey = jString, true
			if s.depth <= maxPathDepth {
				s.keyLen[s.depth-1] = 0
			}
		case b == '}' && s.state == jKeyOrEnd:
			s.pop()
		default:
			s.fail()
		}
	case jColon:
		if b != ':' {
			s.fail()
			return
		}
		s.state = jValue
	case jAfter:
		switch {
		case b == ',' && s.depth > 0:
			if s.kind[s.depth] {
				s.state = jKey
			} else {
				s.state = jValue
			}
		case b == '}' && s.depth > 0 && s.kind[s.depth]:
			s.pop()
		case b == ']' && s.depth > 0 && !s.kind[s.depth]:
			s.pop()
		default:
			s.fail()
		}
	}
}

// value starts the value whose first byte is b.
func (s *jsonScan) value(b byte) {
	slot := s.matching()
	switch {
	case b == '{' || b == '[':
		if slot >= 0 {
			s.pending[slot] = lit{kind: litOther}
		}
		if s.depth == maxDepth {
			s.fail()
			return
		}
		s.depth++
		s.kind[s.depth] = b == '{'
		if b == '{' {
			s.state = jKeyOrEnd
		} else {
			s.state = jValueOrEnd
		}
		return
	case b == '"':
		s.state, s.inKey = jString, false
	case b == '-' || (b >= '0' && b <= '9'):
		s.state = jNumber
	case b == 't' || b == 'f' || b == 'n':
		s.state = jLiteral
	default:
		s.fail()
		return
	}
	s.capture = slot
	if slot >= 0 {
		l := &s.pending[slot]
		l.n = 0
		switch s.state {
		case jString:
			l.kind = litString
		case jNumber:
			l.kind = litNumber
		default:
			l.kind = litOther
		}
		if s.state == jNumber {
			s.keep(b)
		}
	}
}

// keep adds b to the key or captured value being read.
func (s *jsonScan) keep(b byte) {
	if s.inKey {
		if s.depth > maxPathDepth {
			return
		}
		n := &s.keyLen[s.depth-1]
		if *n < maxKey {
			s.keys[s.depth-1][*n] = b
		}
		if *n <= maxKey {
			*n++
		}
		return
	}
	if s.capture < 0 {
		return
	}
	l := &s.pending[s.capture]
	if int(l.n) == maxLit {
		l.kind = litOther // too long for a count or a name
		return
	}
	l.b[l.n] = b
	l.n++
}

func (s *jsonScan) endString() {
	if s.inKey {
		s.inKey = false
		s.state = jColon
		return
	}
	s.endScalar()
}

func (s *jsonScan) endScalar() {
	s.capture = -1
	s.state = jAfter
	if s.depth == 0 {
		s.state = jDone
	}
}

func (s *jsonScan) pop() {
	s.depth--
	s.state = jAfter
	if s.depth == 0 {
		s.state = jDone
	}
}

// end ends the document (its input ended) and reports whether it was
// complete JSON; its values are then in pending.
func (s *jsonScan) end() bool {
	if (s.state == jNumber || s.state == jLiteral) && s.depth == 0 {
		s.endScalar()
	}
	return s.state == jDone
}

// The states of sseScan.
const (
	sField  = iota // reading a line's field name
	sSpace         // after "data:": an optional space
	sData          // in a data line's value
	sIgnore        // in a line that is not data
)

// sseScan reads a server-sent event stream (text/event-stream) and scans
// the data of each event as one JSON document. An event whose data is not
// JSON ("[DONE]") reports nothing; an event cut off by the end of the
// stream is dropped, as the format says.
type sseScan struct {
	json   jsonScan
	commit func(pending []lit)
	state  uint8
	field  [5]byte
	nField int
	cr     bool
	lines  int // data lines of the current event
}

func (s *sseScan) write(p []byte) {
	for _, b := range p {
		if s.cr && b == '\n' {
			s.cr = false
			continue // the LF of a CRLF
		}
		s.cr = b == '\r'
		if b == '\n' || b == '\r' {
			s.endLine()
			continue
		}
		switch s.state {
		case sField:
			if b == ':' {
				if s.isData() {
					s.state = sSpace
				} else {
					s.state = sIgnore
				}
				continue
			}
			if s.nField < len(s.field) {
				s.field[s.nField] = b
			}
			s.nField++
		case sSpace:
			s.state = sData
			s.dataLine()
			if b != ' ' {
				s.json.feed(b)
			}
		case sData:
			s.json.feed(b)
		}
	}
}

func (s *sseScan) isData() bool { return s.nField == 4 && string(s.field[:4]) == "data" }

// dataLine starts a data line: the lines of one event's data are joined by
// a line feed.
func (s *sseScan) dataLine() {
	if s.lines > 0 {
		s.json.feed('\n')
	}
	s.lines++
}

func (s *sseScan) endLine() {
	switch {
	case s.state == sField && s.nField == 0:
		s.dispatch()
	case s.state == sField && s.isData(), s.state == sSpace:
		s.dataLine() // "data" or "data:" alone: an empty line of data
	}
	s.state, s.nField = sField, 0
}

// dispatch ends the current event.
func (s *sseScan) dispatch() {
	if s.lines > 0 && s.json.end() {
		s.commit(s.json.pending)
	}
	s.json.reset()
	s.lines = 0
}
