// Package yamlpos decodes YAML into Go values field by field, keeping the
// position of every field and collecting every problem, each as
// "file:line:column: path: message", with the nearest valid name suggested
// for a misspelt field. It is what floodgate's configuration file and the
// envoyproxy/ratelimit rule files are read with.
package yamlpos

import (
	"encoding"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Bounds on what one file may make the decoder do, so that a hostile or
// broken file (an alias bomb, absurd nesting) fails fast with an error
// instead of eating memory or the stack.
const (
	maxNodes = 100_000
	maxDepth = 40
)

// A Decoder turns a YAML syntax tree into Go values, field by field, so
// that every problem is reported with its position and all of them are
// collected, and so that every field's position is kept for the checks
// that run after decoding.
type Decoder struct {
	// Errs are the problems found so far.
	Errs Errors

	// Pos maps field paths to the positions of their values (of their
	// names, for struct fields and map keys).
	Pos map[string]Pos

	// Env expands ${NAME} in scalars; nil turns expansion off (a file
	// format whose values may hold "${" as text).
	Env func(string) (string, bool)

	// Defaults, when set, is called on every fresh struct value the
	// decoder makes (a pointer's target, a map or slice element) before
	// the file's fields are decoded into it, so that absent fields keep
	// their defaults.
	Defaults func(v reflect.Value)

	file    string
	anchors map[string]ast.Node
	nodes   int
	depth   int
}

// New returns a Decoder for the named file, expanding environment variables
// from the process's environment.
func New(file string) *Decoder {
	return &Decoder{
		file:    file,
		Pos:     map[string]Pos{},
		anchors: map[string]ast.Node{},
		Env:     os.LookupEnv,
	}
}

// File is the name the Decoder was made for.
func (d *Decoder) File() string { return d.file }

// Errorf records a problem at path, at the position recorded for it (or the
// nearest enclosing field's), for checks that run after decoding.
func (d *Decoder) Errorf(path, format string, args ...any) {
	d.Errs = append(d.Errs, &Error{Pos: LookupPos(d.Pos, d.file, path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Wrapf is Errorf keeping err as the Error's cause.
func (d *Decoder) Wrapf(path string, err error, format string, args ...any) {
	d.Errs = append(d.Errs, &Error{Pos: LookupPos(d.Pos, d.file, path), Path: path, Msg: fmt.Sprintf(format, args...), Err: err})
}

// OneOf checks an enumerated value at path, suggesting the nearest valid one
// when it is not valid.
func (d *Decoder) OneOf(path, value string, valid ...string) bool {
	for _, v := range valid {
		if value == v {
			return true
		}
	}
	if s := Suggest(value, valid); s != "" && value != "" {
		d.Errorf(path, "%q is not valid; did you mean %q? (use one of %s)", value, s, strings.Join(valid, ", "))
	} else {
		d.Errorf(path, "%q is not valid (use one of %s)", value, strings.Join(valid, ", "))
	}
	return false
}

// Has reports whether the file sets the field at path.
func (d *Decoder) Has(path string) bool { _, ok := d.Pos[path]; return ok }

// Parse parses data and returns the body of its single document (nil
// for an empty file).
//
// A file beyond the bounds of CheckBounds is reported, at the line where
// it crosses one, without being parsed.
func (d *Decoder) Parse(data []byte) ast.Node {
	if err := CheckBounds(d.file, data); err != nil {
		d.Errs = append(d.Errs, err)
		return nil
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		p := Pos{File: d.file}
		msg := err.Error()
		if ye, ok := err.(yaml.Error); ok {
			msg = ye.GetMessage()
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				p.Line, p.Column = tk.Position.Line, tk.Position.Column
			}
		}
		p, hint := indentHint(data, p, msg)
		d.Errs = append(d.Errs, &Error{Pos: p, Msg: "invalid YAML: " + msg + hint, Err: err})
		return nil
	}
	var body ast.Node
	n := 0
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if n++; n == 2 {
			d.errorf(doc.Body, "", "the file holds several YAML documents; put the whole configuration in one")
			return nil
		}
		body = doc.Body
	}
	return body
}

// indentHint turns the parser's view of a layout mistake into the line to
// fix and what to do: YAML nests by indentation, and a field indented more
// than the fields beside it (after a field with a value) is reported by the
// parser at the value before it.
func indentHint(data []byte, p Pos, msg string) (Pos, string) {
	lines := strings.Split(string(data), "\n")
	if p.Line < 1 || p.Line > len(lines) {
		return p, ""
	}
	if strings.Contains(msg, "'\t'") || strings.HasPrefix(strings.TrimLeft(lines[p.Line-1], " "), "\t") {
		return p, "; YAML indents with spaces, never tabs"
	}
	if !strings.Contains(msg, "not allowed in this context") {
		return p, ""
	}
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	cur := lines[p.Line-1]
	for i := p.Line; i < len(lines); i++ {
		next := lines[i]
		if t := strings.TrimSpace(next); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if indent(next) > indent(cur) && strings.Contains(cur, ": ") && !strings.HasSuffix(strings.TrimSpace(cur), ":") {
			return Pos{File: p.File, Line: i + 1, Column: indent(next) + 1},
				fmt.Sprintf("; this line is indented more than line %d, which already has a value: line it up with the fields beside it", p.Line)
		}
		break
	}
	return p, "; check the indentation here: fields of one mapping line up, each nested mapping one step further in"
}

func (d *Decoder) at(n ast.Node) Pos {
	p := Pos{File: d.file}
	if n == nil {
		return p
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		p.Line, p.Column = tk.Position.Line, tk.Position.Column
	}
	return p
}

func (d *Decoder) errorf(n ast.Node, path, format string, args ...any) {
	d.Errs = append(d.Errs, &Error{Pos: d.at(n), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *Decoder) wrap(n ast.Node, path string, err error) {
	d.Errs = append(d.Errs, &Error{Pos: d.at(n), Path: path, Msg: err.Error(), Err: err})
}

// Resolve strips tags and anchors and follows aliases, returning the node
// that carries the value.
func (d *Decoder) Resolve(n ast.Node) ast.Node {
	for range maxDepth {
		switch t := n.(type) {
		case *ast.TagNode:
			n = t.Value
		case *ast.AnchorNode:
			if t.Name != nil {
				d.anchors[t.Name.GetToken().Value] = t.Value
			}
			n = t.Value
		case *ast.AliasNode:
			if t.Value == nil {
				return nil
			}
			target, ok := d.anchors[t.Value.GetToken().Value]
			if !ok {
				d.errorf(n, "", "unknown alias *%s; define the anchor &%s before using it", t.Value.GetToken().Value, t.Value.GetToken().Value)
				return nil
			}
			n = target
		default:
			return n
		}
	}
	return nil
}

// Decode decodes n into v (addressable), recording positions under path.
func (d *Decoder) Decode(n ast.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.errorf(n, path, "the file expands to more than %d values (aliases?); simplify it", maxNodes)
		}
		return
	}
	if d.depth++; d.depth > maxDepth {
		d.depth--
		d.errorf(n, path, "nested more than %d levels deep", maxDepth)
		return
	}
	defer func() { d.depth-- }()

	orig := n
	n = d.Resolve(n)
	if n == nil {
		return
	}
	d.Pos[path] = d.at(orig)

	if _, null := n.(*ast.NullNode); null && (isValue(v) || v.Kind() != reflect.Pointer && v.Kind() != reflect.Struct) {
		// "field:" with nothing after it leaves the default. (A section
		// left empty, "proxy:", is there with its defaults.)
		return
	}
	if v.CanAddr() {
		if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
			s, ok := d.Scalar(n, path)
			if !ok {
				return
			}
			if err := tu.UnmarshalText([]byte(s)); err != nil {
				d.wrap(n, path, err)
			}
			return
		}
	}

	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			d.defaults(v)
		}
		if _, null := n.(*ast.NullNode); null {
			return
		}
		d.Decode(orig, v.Elem(), path)
		d.nodes-- // the same node, counted once
	case reflect.Struct:
		if _, null := n.(*ast.NullNode); null {
			return
		}
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.String:
		if s, ok := d.Scalar(n, path); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		d.decodeBool(n, v, path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.decodeInt(n, v, path)
	case reflect.Float32, reflect.Float64:
		d.decodeFloat(n, v, path)
	case reflect.Interface:
		if v.NumMethod() != 0 {
			d.errorf(n, path, "cannot hold a %s (internal)", v.Type())
			return
		}
		// Free-form data (an envoyproxy/ratelimit descriptor's metadata):
		// taken as YAML means it, maps with string keys.
		var x any
		if err := yaml.NodeToValue(n, &x); err != nil {
			d.wrap(n, path, err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		d.errorf(n, path, "cannot hold a %s (internal)", v.Type())
	}
}

// Scalar returns the text of a scalar node, with environment variables
// expanded.
func (d *Decoder) Scalar(n ast.Node, path string) (string, bool) {
	var s string
	switch t := n.(type) {
	case nil: // an alias that resolved to nothing, already reported
		return "", false
	case *ast.StringNode:
		s = t.Value
	case *ast.LiteralNode:
		if t.Value != nil {
			s = t.Value.Value
		}
	case *ast.NullNode:
		return "", true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		s = n.GetToken().Value
	case *ast.MappingNode, *ast.MappingValueNode:
		if text, ok := d.colonScalar(n); ok {
			s = text
			break
		}
		d.errorf(n, path, "expected a single value, found a mapping")
		return "", false
	case *ast.SequenceNode:
		d.errorf(n, path, "expected a single value, found a list")
		return "", false
	default:
		d.errorf(n, path, "expected a single value, found %s", n.Type())
		return "", false
	}
	if d.Env == nil { // a file format without expansion
		return s, true
	}
	out, err := expandEnv(s, d.Env)
	if err != nil {
		d.wrap(n, path, err)
		return "", false
	}
	return out, true
}

// expandEnv replaces ${NAME} and ${NAME:-default} with the environment's
// values; $${ stands for a literal ${. A variable that is not set and has
// no default is an error, so that a missing secret never silently becomes
// an empty password.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in %q; close it with } or write $${ for a literal ${", s)
		}
		expr := s[i+2 : i+end]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !validEnvName(name) {
			return "", fmt.Errorf("${%s}: %q is not an environment variable name (letters, digits and _)", expr, name)
		}
		val, ok := lookup(name)
		switch {
		case ok && (val != "" || !hasDef):
			b.WriteString(val)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("environment variable %s is not set; export it, or write ${%s:-default}", name, name)
		}
		s = s[i+end+1:]
	}
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// numberText returns the text of a number-like scalar; a quoted string is
// accepted only when it came from an environment variable, so that
// `db: ${REDIS_DB}` works while `db: "0"` is still a type error.
func (d *Decoder) numberText(n ast.Node, path, want string) (string, bool) {
	switch t := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return n.GetToken().Value, true
	case *ast.StringNode:
		if strings.Contains(t.Value, "${") {
			return d.Scalar(n, path)
		}
		d.errorf(n, path, "expected %s, found the string %q", want, t.Value)
		return "", false
	default:
		d.scalarKindError(n, path, want)
		return "", false
	}
}

func (d *Decoder) scalarKindError(n ast.Node, path, want string) {
	switch n.(type) {
	case nil:
		d.errorf(n, path, "expected %s", want)
	case *ast.MappingNode, *ast.MappingValueNode:
		d.errorf(n, path, "expected %s, found a mapping", want)
	case *ast.SequenceNode:
		d.errorf(n, path, "expected %s, found a list", want)
	default:
		d.errorf(n, path, "expected %s, found %s", want, n.Type())
	}
}

func (d *Decoder) decodeBool(n ast.Node, v reflect.Value, path string) {
	s, ok := d.numberText(n, path, "true or false")
	if !ok {
		return
	}
	switch s {
	case "true", "True", "TRUE":
		v.SetBool(true)
	case "false", "False", "FALSE":
		v.SetBool(false)
	default:
		d.errorf(n, path, "expected true or false, found %q", s)
	}
}

func (d *Decoder) decodeInt(n ast.Node, v reflect.Value, path string) {
	s, ok := d.numberText(n, path, "a whole number")
	if !ok {
		return
	}
	clean := strings.ReplaceAll(s, "_", "")
	i, err := strconv.ParseInt(clean, 0, 64)
	if err != nil {
		if f, ferr := strconv.ParseFloat(clean, 64); ferr == nil && f != math.Trunc(f) {
			d.errorf(n, path, "expected a whole number, found %s", s)
			return
		}
		d.errorf(n, path, "expected a whole number, found %q", s)
		return
	}
	if v.OverflowInt(i) {
		d.errorf(n, path, "%s is too large", s)
		return
	}
	v.SetInt(i)
}

func (d *Decoder) decodeFloat(n ast.Node, v reflect.Value, path string) {
	s, ok := d.numberText(n, path, "a number")
	if !ok {
		return
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		d.errorf(n, path, "expected a finite number, found %q", s)
		return
	}
	v.SetFloat(f)
}

// pairs returns the key/value pairs of a mapping node, merge keys (<<)
// first so that explicit keys override what they merge in.
func (d *Decoder) pairs(n ast.Node, path string) ([]*ast.MappingValueNode, bool) {
	return d.mergedPairs(n, path, map[ast.Node]bool{})
}

// mergedPairs is pairs with the set of mappings being merged, so that a
// merge key that refers to its own mapping is an error, not a loop.
func (d *Decoder) mergedPairs(n ast.Node, path string, merging map[ast.Node]bool) ([]*ast.MappingValueNode, bool) {
	if n == nil { // an alias that resolved to nothing, already reported
		return nil, false
	}
	if merging[n] {
		d.errorf(n, path, "a merge key (<<) refers to the mapping it is in")
		return nil, false
	}
	if d.nodes++; d.nodes > maxNodes {
		return nil, false
	}
	merging[n] = true
	defer delete(merging, n)
	var values []*ast.MappingValueNode
	switch t := n.(type) {
	case *ast.MappingNode:
		values = t.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{t}
	default:
		d.scalarKindError(n, path, "a mapping (field: value)")
		return nil, false
	}
	var merged, own []*ast.MappingValueNode
	for _, mv := range values {
		if mv == nil || mv.Key == nil {
			continue
		}
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			src := d.Resolve(mv.Value)
			if src == nil {
				continue
			}
			if seq, ok := src.(*ast.SequenceNode); ok {
				for _, e := range seq.Values {
					if p, ok := d.mergedPairs(d.Resolve(e), path, merging); ok {
						merged = append(merged, p...)
					}
				}
				continue
			}
			if p, ok := d.mergedPairs(src, path, merging); ok {
				merged = append(merged, p...)
			}
			continue
		}
		own = append(own, mv)
	}
	if len(merged) == 0 {
		return own, true
	}
	// Drop merged pairs that an explicit key overrides.
	set := map[string]bool{}
	for _, mv := range own {
		set[keyText(mv.Key)] = true
	}
	out := make([]*ast.MappingValueNode, 0, len(merged)+len(own))
	seen := map[string]bool{}
	for i := len(merged) - 1; i >= 0; i-- { // later merges do not override earlier ones
		k := keyText(merged[i].Key)
		if set[k] || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, merged[i])
	}
	return append(out, own...), true
}

func keyText(k ast.MapKeyNode) string {
	switch t := k.(type) {
	case *ast.StringNode:
		return t.Value
	case *ast.MappingKeyNode:
		if t.Value != nil {
			return t.Value.GetToken().Value
		}
		return ""
	}
	if tk := k.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// A Field is one YAML field of a struct type: its name in the file and its
// index path (through inline embedded structs).
type Field struct {
	Name  string
	Index []int
}

var fieldCache sync.Map // reflect.Type → []fieldInfo

// Fields lists the YAML fields of a struct type, with inline embedded
// structs flattened and fields tagged yaml:"-" left out.
func Fields(t reflect.Type) []Field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]Field)
	}
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for _, inner := range Fields(sf.Type) {
				out = append(out, Field{inner.Name, append([]int{i}, inner.Index...)})
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		out = append(out, Field{name, []int{i}})
	}
	fieldCache.Store(t, out)
	return out
}

func (d *Decoder) decodeStruct(n ast.Node, v reflect.Value, path string) {
	pairs, ok := d.pairs(n, path)
	if !ok {
		return
	}
	if path == "" && len(pairs) > 0 {
		d.Pos[""] = d.at(pairs[0].Key) // the document starts at its first field
	}
	fields := Fields(v.Type())
	seen := map[string]bool{}
	for _, mv := range pairs {
		key := keyText(mv.Key)
		fpath := JoinPath(path, key)
		if path == "" && strings.HasPrefix(key, "x-") {
			// Top-level x- fields are ignored, as in Compose files: a
			// place to define anchors (&limits) that fields below use.
			d.registerAnchors(mv.Value, 0)
			continue
		}
		var f *Field
		for i := range fields {
			if fields[i].Name == key {
				f = &fields[i]
				break
			}
		}
		if f == nil {
			names := make([]string, len(fields))
			for i, fi := range fields {
				names[i] = fi.Name
			}
			if s := Suggest(key, names); s != "" {
				d.errorf(mv.Key, fpath, "unknown field %q; did you mean %q?", key, s)
			} else {
				sort.Strings(names)
				d.errorf(mv.Key, fpath, "unknown field %q (known: %s)", key, strings.Join(names, ", "))
			}
			continue
		}
		if seen[key] {
			d.errorf(mv.Key, fpath, "%s is set twice; keep one", key)
			continue
		}
		seen[key] = true
		d.Decode(mv.Value, v.FieldByIndex(f.Index), fpath)
		// Errors about a field point at its name, where the eye looks.
		d.Pos[fpath] = d.at(mv.Key)
	}
}

func (d *Decoder) decodeMap(n ast.Node, v reflect.Value, path string) {
	if v.Type().Key().Kind() != reflect.String {
		d.errorf(n, path, "cannot hold a %s (internal)", v.Type())
		return
	}
	pairs, ok := d.pairs(n, path)
	if !ok {
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(v.Type(), len(pairs)))
	}
	seen := map[string]bool{}
	for _, mv := range pairs {
		key := keyText(mv.Key)
		kpath := MapKeyPath(path, key)
		if seen[key] {
			d.errorf(mv.Key, kpath, "%q is set twice; keep one", key)
			continue
		}
		seen[key] = true
		elem := reflect.New(v.Type().Elem())
		d.defaults(elem)
		d.Decode(mv.Value, elem.Elem(), kpath)
		d.Pos[kpath] = d.at(mv.Key)
		v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem.Elem())
	}
}

func (d *Decoder) decodeSlice(n ast.Node, v reflect.Value, path string) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		if OneValue(v.Type().Elem()) && !isCollection(n) {
			// A single value stands for a list of one: `methods: GET`.
			elem := reflect.New(v.Type().Elem()).Elem()
			d.Decode(n, elem, path+"[0]")
			v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), elem))
			return
		}
		d.scalarKindError(n, path, "a list")
		return
	}
	out := reflect.MakeSlice(v.Type(), 0, len(seq.Values))
	for i, e := range seq.Values {
		elem := reflect.New(v.Type().Elem())
		d.defaults(elem)
		d.Decode(e, elem.Elem(), path+"["+strconv.Itoa(i)+"]")
		out = reflect.Append(out, elem.Elem())
	}
	v.Set(out)
}

// OneValue reports whether values of type t are written as one YAML scalar:
// strings, numbers and booleans, and types that read themselves from text
// (encoding.TextUnmarshaler). A list of such values may be written as one
// value, standing for a list of one.
func OneValue(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64:
		return true
	}
	return false
}

func isCollection(n ast.Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode:
		return true
	}
	return false
}

// JoinPath appends a field name to a path.
func JoinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// MapKeyPath appends a map key to a path: as a field when it looks like
// one (policies.api), quoted in brackets otherwise
// (overrides["user:batch_worker"]).
func MapKeyPath(path, key string) string {
	plain := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return JoinPath(path, key)
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// LookupPos returns the position recorded for path or for the nearest
// enclosing path that has one.
func LookupPos(pos map[string]Pos, file, path string) Pos {
	for path != "" {
		if p, ok := pos[path]; ok {
			return p
		}
		i := parentEnd(path)
		if i <= 0 {
			break
		}
		path = path[:i]
	}
	if p, ok := pos[""]; ok { // the document itself
		return p
	}
	return Pos{File: file, Line: 1, Column: 1} // an empty file
}

// parentEnd returns the length of path's parent path: path without its last
// field or index, skipping over quoted map keys.
func parentEnd(path string) int {
	if strings.HasSuffix(path, `"]`) {
		if i := strings.LastIndex(path, `["`); i >= 0 {
			return i
		}
	}
	return strings.LastIndexAny(path, ".[")
}

// colonScalar recognises a value such as 127.0.0.1:6379 or header:X-Key
// that the parser, inside a flow collection ([a:b]), read as a one-pair
// mapping: the key, a colon and the value written without any space. A
// mapping written as one (a: b) is still a mapping.
func (d *Decoder) colonScalar(n ast.Node) (string, bool) {
	var mv *ast.MappingValueNode
	switch t := n.(type) {
	case *ast.MappingValueNode:
		mv = t
	case *ast.MappingNode:
		if len(t.Values) != 1 {
			return "", false
		}
		mv = t.Values[0]
	}
	if mv == nil || mv.Key == nil || mv.Value == nil {
		return "", false
	}
	kt, vt := mv.Key.GetToken(), mv.Value.GetToken()
	if kt == nil || vt == nil || kt.Position == nil || vt.Position == nil {
		return "", false
	}
	switch mv.Value.(type) {
	case *ast.StringNode, *ast.IntegerNode, *ast.FloatNode:
	default:
		return "", false
	}
	if kt.Position.Line != vt.Position.Line || kt.Position.Column+len(kt.Value)+1 != vt.Position.Column {
		return "", false
	}
	return kt.Value + ":" + vt.Value, true
}

// registerAnchors records the anchors under n without decoding it.
func (d *Decoder) registerAnchors(n ast.Node, depth int) {
	if n == nil || depth > maxDepth {
		return
	}
	if d.nodes++; d.nodes > maxNodes {
		return
	}
	switch t := n.(type) {
	case *ast.AnchorNode:
		if t.Name != nil {
			d.anchors[t.Name.GetToken().Value] = t.Value
		}
		d.registerAnchors(t.Value, depth+1)
	case *ast.TagNode:
		d.registerAnchors(t.Value, depth+1)
	case *ast.MappingNode:
		for _, mv := range t.Values {
			d.registerAnchors(mv, depth+1)
		}
	case *ast.MappingValueNode:
		d.registerAnchors(t.Value, depth+1)
	case *ast.SequenceNode:
		for _, e := range t.Values {
			d.registerAnchors(e, depth+1)
		}
	}
}

// isValue reports whether v reads itself from one YAML value (a Rate, a
// Duration, a Key) rather than being a section.
func isValue(v reflect.Value) bool {
	if !v.CanAddr() {
		return false
	}
	switch v.Addr().Interface().(type) {
	case encoding.TextUnmarshaler:
		return true
	}
	return false
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// defaults applies Defaults to a fresh value (a pointer to it).
func (d *Decoder) defaults(p reflect.Value) {
	if d.Defaults != nil {
		d.Defaults(p)
	}
}
