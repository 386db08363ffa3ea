package config

import (
	"encoding"

	"github.com/floodgate-go/floodgate/envoyrules"

	"github.com/floodgate-go/floodgate/internal/yamlpos"

	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

var update = flag.Bool("update", false, "rewrite schema.json and ../docs/config.md from the structs")

// fieldEnums maps "Type.Field" to the values of string fields whose Go type
// does not say them.
var fieldEnums = map[string][]string{
	"LimitSpec.Algorithm":           enumAlgorithms,
	"Envoy.Algorithm":               enumAlgorithms,
	"Envoy.Descriptors":             enumEnvoyDescriptors,
	"Envoy.EngineErrors":            enumEnvoyErrors,
	"RateLimit.Algorithm":           enumAlgorithms,
	"Log.Format":                    enumLogFormats,
	"Log.Level":                     enumLogLevels,
	"AdaptiveConcurrency.Algorithm": enumAdaptive,
	"Leasing.Lease":                 enumLease,
}

// typeEnums maps enumerated string types to their values.
var typeEnums = map[string][]string{
	"Engine":          enumEngines,
	"RedisMode":       enumRedisModes,
	"Mode":            enumFailureModes,
	"ReplicationMode": enumReplication,
	"Body":            enumBodies,
	"Count":           enumCounts,
	"HeaderStyle":     enumHeaderStyles,
}

// docs holds the doc comments of the package's types and fields.
type docs struct {
	types    map[string]string
	typesRaw map[string]string // as written, for Markdown
	fields   map[string]string // "Type.Field"
}

func readDocs(t *testing.T) docs {
	t.Helper()
	fset := token.NewFileSet()
	d := docs{types: map[string]string{}, typesRaw: map[string]string{}, fields: map[string]string{}}
	// The Envoy rule file's types are documented where they live.
	// Types of the library that the file uses are documented where they
	// live; a name the configuration defines itself wins.
	files, _ := filepath.Glob("*.go")
	for _, dir := range []string{"../envoyrules", "../httplimit", "../httpmatch", "../tokencost"} {
		more, _ := filepath.Glob(dir + "/*.go")
		files = append(files, more...)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := gd.Doc
				if ts.Doc != nil {
					doc = ts.Doc
				}
				if _, defined := d.types[ts.Name.Name]; defined {
					continue
				}
				d.types[ts.Name.Name] = clean(doc.Text())
				d.typesRaw[ts.Name.Name] = doc.Text()
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				prev := ""
				for _, fl := range st.Fields.List {
					text := clean(fl.Doc.Text())
					for _, n := range fl.Names {
						// "ReadTimeout and WriteTimeout bound ...": the
						// second field shares the first one's comment.
						if text == "" && strings.Contains(prev, n.Name) {
							text = prev
						}
						d.fields[ts.Name.Name+"."+n.Name] = text
					}
					if text != "" {
						prev = text
					}
				}
			}
		}
	}
	return d
}

func clean(s string) string { return strings.Join(strings.Fields(s), " ") }

type field struct {
	name  string // yaml
	owner string // Go type that declares it
	sf    reflect.StructField
}

// yamlFields lists the YAML fields of a struct type with their declaring
// types, flattening inline embeds, in declaration order.
func yamlFields(t reflect.Type) []field {
	var out []field
	for _, f := range yamlpos.Fields(t) {
		// The field's owner is the struct that declares it, an inline
		// one's for the fields it brings.
		owner := t
		for _, i := range f.Index[:len(f.Index)-1] {
			owner = owner.Field(i).Type
		}
		out = append(out, field{f.Name, owner.Name(), t.FieldByIndex(f.Index)})
	}
	return out
}

type schemaGen struct {
	docs docs
	defs map[string]any
}

func (g *schemaGen) typeSchema(t reflect.Type, owner, goField string) map[string]any {
	enum := fieldEnums[owner+"."+goField]
	if e, ok := typeEnums[t.Name()]; ok {
		enum = e
	}
	if enum != nil && t.Kind() != reflect.Slice && t.Kind() != reflect.Pointer {
		// An enumerated value, a string or a type that reads its name.
		return map[string]any{"type": "string", "enum": enum}
	}
	switch t {
	case reflect.TypeFor[Duration]():
		return map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, "examples": []string{"100ms", "1s", "2m30s"}}
	case reflect.TypeFor[Rate]():
		return map[string]any{"type": "string", "examples": []string{"100/min", "10/s", "1000/h", "5/1d", "10/30s", "100 per minute"}}
	case reflect.TypeFor[Key]():
		return map[string]any{"type": []string{"string", "array"}, "items": map[string]any{"type": "string"}, "minItems": 1, "examples": []any{"ip", "header:X-API-Key", "user:X-User-ID", []string{"ip", "route"}}}
	case reflect.TypeFor[Cost]():
		return map[string]any{"type": []string{"integer", "string"}, "examples": []any{1, "header:X-Cost", "response_header:X-Tokens-Used", "tokens:output"}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.typeSchema(t.Elem(), owner, goField)
	case reflect.String:
		if enum != nil {
			return map[string]any{"type": "string", "enum": enum}
		}
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		items := g.typeSchema(t.Elem(), owner, goField)
		if yamlpos.OneValue(t.Elem()) {
			// A single value stands for a list of one.
			return map[string]any{"type": []any{"array", items["type"]}, "items": items}
		}
		return map[string]any{"type": "array", "items": items}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.typeSchema(t.Elem(), owner, goField)}
	case reflect.Struct:
		g.define(t)
		return map[string]any{"$ref": "#/$defs/" + t.Name()}
	}
	panic("no schema for " + t.String())
}

func (g *schemaGen) define(t reflect.Type) {
	if _, done := g.defs[t.Name()]; done {
		return
	}
	props := map[string]any{}
	def := map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	if d := g.docs.types[t.Name()]; d != "" {
		def["description"] = d
	}
	g.defs[t.Name()] = def
	for _, f := range yamlFields(t) {
		s := g.typeSchema(f.sf.Type, f.owner, f.sf.Name)
		if d := g.docs.fields[f.owner+"."+f.sf.Name]; d != "" {
			s["description"] = d
		}
		props[f.name] = s
	}
}

func generateSchema(t *testing.T) []byte {
	g := &schemaGen{docs: readDocs(t), defs: map[string]any{}}
	g.define(reflect.TypeFor[Config]())
	g.defs["Config"].(map[string]any)["patternProperties"] = map[string]any{
		"^x-": map[string]any{"description": "Ignored: a place for YAML anchors used below."},
	}
	root := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"title":       "floodgate configuration",
		"description": "The configuration file of floodgate serve. Reference: docs/config.md.",
		"$ref":        "#/$defs/Config",
		"$defs":       g.defs,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSchemaUpToDate regenerates the schema from the structs and their
// comments; run `go test ./config -run UpToDate -update` after changing
// them.
func TestSchemaUpToDate(t *testing.T) {
	got := generateSchema(t)
	if *update {
		if err := os.WriteFile("schema.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, Schema()) {
		t.Fatal("schema.json is out of date with the structs; run go test ./config -run UpToDate -update")
	}
}

// TestSchemaMatchesStructs checks the shipped schema against the structs
// directly: every yaml field is a property with a description, and every
// property is a field.
func TestSchemaMatchesStructs(t *testing.T) {
	var s struct {
		Schema string                    `json:"$schema"`
		Defs   map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatalf("schema.json is not valid JSON: %v", err)
	}
	if !strings.Contains(s.Schema, "2020-12") {
		t.Errorf("$schema = %q", s.Schema)
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || t == reflect.TypeFor[Rate]() || t == reflect.TypeFor[Cost]() || t == reflect.TypeFor[KeyPart]() {
			return
		}
		seen[t] = true
		def, ok := s.Defs[t.Name()]
		if !ok {
			panic("missing def " + t.Name())
		}
		props, _ := def["properties"].(map[string]any)
		names := map[string]bool{}
		for _, f := range yamlFields(t) {
			names[f.name] = true
			p, ok := props[f.name].(map[string]any)
			if !ok {
				panic(fmt.Sprintf("%s.%s (yaml %q) has no schema property", t.Name(), f.sf.Name, f.name))
			}
			if p["description"] == nil {
				panic(fmt.Sprintf("%s.%s has no description: document the field", t.Name(), f.sf.Name))
			}
			walk(f.sf.Type)
		}
		for p := range props {
			if !names[p] {
				panic(fmt.Sprintf("schema property %s.%s is no field", t.Name(), p))
			}
		}
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatal(r)
		}
	}()
	walk(reflect.TypeFor[Config]())
}

// validate checks v (decoded YAML) against the subset of JSON Schema that
// schema.json uses.
func validate(root map[string]any, s map[string]any, v any, path string) []string {
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		return validate(root, root["$defs"].(map[string]any)[name].(map[string]any), v, path)
	}
	var errs []string
	if ty, ok := s["type"]; ok {
		var types []string
		switch t := ty.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		if !slicesContain(types, jsonType(v)) && !(jsonType(v) == "integer" && slicesContain(types, "number")) {
			return []string{fmt.Sprintf("%s: %s, want %v", path, jsonType(v), types)}
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if e == v {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Sprintf("%s: %v not in %v", path, v, enum))
		}
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for k, val := range x {
			if p, ok := props[k].(map[string]any); ok {
				errs = append(errs, validate(root, p, val, path+"."+k)...)
			} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
				errs = append(errs, validate(root, ap, val, path+"."+k)...)
			} else if pp, _ := s["patternProperties"].(map[string]any); pp["^x-"] != nil && strings.HasPrefix(k, "x-") {
				continue // an extension field: anything goes
			} else if s["additionalProperties"] == false {
				errs = append(errs, fmt.Sprintf("%s.%s: not allowed", path, k))
			}
		}
	case []any:
		if it, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				errs = append(errs, validate(root, it, e, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return errs
}

func slicesContain(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case int, int64, uint64:
		return "integer"
	}
	return fmt.Sprintf("%T", v)
}

// TestExamplesMatchSchema validates every example (and the default) against
// the shipped schema, so an editor using it agrees with the daemon.
func TestExamplesMatchSchema(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(Schema(), &root); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../examples/config/*.yaml")
	inputs := map[string][]byte{"default.yaml": DefaultYAML()}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[f] = b
	}
	for name, b := range inputs {
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		// Through JSON, so numbers and maps have JSON's shapes.
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(j, &doc); err != nil {
			t.Fatal(err)
		}
		if errs := validate(root, root, doc, "$"); len(errs) > 0 {
			t.Errorf("%s:\n%s", name, strings.Join(errs, "\n"))
		}
	}
	// And the validator can fail: a typo and a wrong type are caught.
	var bad any
	_ = json.Unmarshal([]byte(`{"storage": {"engin": "memory", "memory": {"max_keys": "many"}}}`), &bad)
	if errs := validate(root, root, bad, "$"); len(errs) != 2 {
		t.Errorf("bad document: %v, want 2 errors", errs)
	}
}

const docsIntro = `# Configuration reference

` + "`floodgate serve`" + ` reads one YAML file (` + "`floodgate validate FILE`" + ` checks it without serving).
This page is generated from the structs of package ` + "`config`" + ` and their comments
(` + "`go test ./config -run UpToDate -update`" + `), so it always names every field there is.
Examples: [examples/config](../examples/config); editors: [config/schema.json](../config/schema.json).

General rules:

- Unknown fields are errors, with the nearest known name suggested. Every error names
  ` + "`file:line:column`" + ` and the field's path, and all errors of a file are reported at once.
- An absent field takes the default below; an absent section (proxy, check, envoy, postgres)
  is off. ` + "`admin`" + ` is on unless its listen is "".
- ` + "`${NAME}`" + ` and ` + "`${NAME:-default}`" + ` in any value are replaced from the environment (an unset
  variable without default is an error); ` + "`$${`" + ` is a literal ` + "`${`" + `. Secrets can also come from
  files: ` + "`password_file`" + `, ` + "`token_file`" + `, read at every load.
- Relative file names (TLS files, secret files, Envoy configurations) are relative to the
  configuration file's directory.
- Durations use Go syntax: ` + "`100ms`, `1s`, `2m30s`" + `.
- Rates are ` + "`COUNT/PERIOD`" + `: ` + "`100/min`, `100/m`, `100/minute`, `100 per minute`, `10/s`, `1000/h`,\n  `5/1d`, `10/30s`, `2/w`" + `. The count is a whole number of at least 1 (` + "`1.5/s`" + ` is rejected: write ` + "`3/2s`" + `).
- Keys: ` + "`ip`, `header:NAME`, `user:NAME`, `route`, `global`" + `, or a list of them for a composite key.
- Costs: a whole number, ` + "`header:NAME`" + `, ` + "`response_header:NAME`" + ` or ` + "`tokens:input`" + `, ` + "`tokens:output`" + `, ` + "`tokens:total`" + `.
- The file is watched (its directory, so editors' renames and Kubernetes ConfigMap updates are
  seen) and reloaded on ` + "`SIGHUP`" + `: a valid new file replaces the old one, an invalid one is
  reported and the old one keeps serving.

The built-in default, used when no file is given:

` + "```yaml\n"

type docSection struct {
	t     reflect.Type
	paths []string
}

func generateDocs(t *testing.T) []byte {
	d := readDocs(t)
	var order []*docSection
	byType := map[reflect.Type]*docSection{}
	var visit func(t reflect.Type, path string)
	visit = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			if t.Kind() == reflect.Slice {
				path += "[]"
			} else if t.Kind() == reflect.Map {
				path += ".NAME"
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[Rate]() || t == reflect.TypeFor[Cost]() || t == reflect.TypeFor[KeyPart]() {
			return
		}
		if s, ok := byType[t]; ok {
			s.paths = append(s.paths, path)
			return
		}
		s := &docSection{t: t, paths: []string{path}}
		byType[t] = s
		order = append(order, s)
		for _, f := range yamlFields(t) {
			visit(f.sf.Type, yamlpos.JoinPath(path, f.name))
		}
	}
	visit(reflect.TypeFor[Config](), "")

	var b strings.Builder
	b.WriteString(docsIntro)
	b.Write(DefaultYAML())
	b.WriteString("```\n")
	for _, s := range order {
		title := s.paths[0]
		if title == "" {
			title = "(top level)"
		}
		fmt.Fprintf(&b, "\n<a id=\"%s\"></a>\n\n## %s\n\n", s.t.Name(), title)
		if len(s.paths) > 1 {
			fmt.Fprintf(&b, "Also at: %s.\n\n", "`"+strings.Join(s.paths[1:], "`, `")+"`")
		}
		var p comment.Parser
		b.Write((&comment.Printer{}).Markdown(p.Parse(d.typesRaw[s.t.Name()])))
		b.WriteString("\n")
		b.WriteString("| Field | Type | Default | Description |\n| --- | --- | --- | --- |\n")
		defaults := reflect.New(s.t)
		if df, ok := defaults.Interface().(defaulter); ok {
			df.setDefaults()
		}
		for _, f := range yamlFields(s.t) {
			v := defaults.Elem()
			for _, sf := range yamlFields(s.t) {
				if sf.name == f.name {
					v = fieldByName(v, f.sf.Name)
				}
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.name, docType(f.sf.Type, f.owner, f.sf.Name),
				docDefault(v), strings.ReplaceAll(d.fields[f.owner+"."+f.sf.Name], "|", `\|`))
		}
	}
	return []byte(b.String())
}

// fieldByName finds a field by Go name, through inline embeds.
func fieldByName(v reflect.Value, name string) reflect.Value {
	f, _ := v.Type().FieldByName(name)
	return v.FieldByIndex(f.Index)
}

func docType(t reflect.Type, owner, goField string) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return "duration"
	case reflect.TypeFor[Rate]():
		return "rate"
	case reflect.TypeFor[Key]():
		return "key"
	case reflect.TypeFor[Cost]():
		return "cost"
	}
	enum := fieldEnums[owner+"."+goField]
	if e, ok := typeEnums[t.Name()]; ok {
		enum = e
	}
	if enum != nil && t.Kind() != reflect.Slice && t.Kind() != reflect.Pointer {
		return "`" + strings.Join(enum, "` \\| `") + "`"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return docType(t.Elem(), owner, goField)
	case reflect.String:
		if enum != nil {
			return "`" + strings.Join(enum, "` \\| `") + "`"
		}
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + docType(t.Elem(), owner, goField)
	case reflect.Map:
		return "map of " + docType(t.Elem(), owner, goField)
	case reflect.Struct:
		return fmt.Sprintf("[%s](#%s)", t.Name(), t.Name())
	}
	return t.String()
}

func docDefault(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Bool:
		return fmt.Sprintf("`%t`", v.Bool())
	case reflect.Pointer, reflect.Struct, reflect.Map:
		if v.Type() == reflect.TypeFor[Rate]() || v.Type() == reflect.TypeFor[Cost]() {
			if v.IsZero() {
				return ""
			}
			return "`" + fmt.Sprint(v.Interface()) + "`"
		}
		return ""
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok && v.Kind() != reflect.String {
		// An enumerated value whose zero is a choice (body: problem).
		if b, err := m.MarshalText(); err == nil {
			return "`" + string(b) + "`"
		}
		return ""
	}
	if v.IsZero() {
		return ""
	}
	switch x := v.Interface().(type) {
	case Duration:
		return "`" + x.D().String() + "`"
	case Key:
		return "`" + x.String() + "`"
	case []string:
		return "`[" + strings.Join(x, ", ") + "]`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

func TestDocsUpToDate(t *testing.T) {
	got := generateDocs(t)
	const path = "../docs/config.md"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, have) {
		t.Fatal("docs/config.md is out of date with the structs; run go test ./config -run UpToDate -update")
	}
}

// TestDocsMentionEveryField: every yaml field of the daemon's file is in
// docs/config.md, and every field of an envoyproxy/ratelimit file in
// docs/envoy.md.
func TestDocsMentionEveryField(t *testing.T) {
	for doc, root := range map[string]reflect.Type{"../docs/config.md": reflect.TypeFor[Config](), "../docs/envoy.md": reflect.TypeFor[envoyrules.File]()} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[reflect.Type]bool{}
		var walk func(ty reflect.Type)
		walk = func(ty reflect.Type) {
			for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
				ty = ty.Elem()
			}
			if ty.Kind() != reflect.Struct || seen[ty] || ty == reflect.TypeFor[Rate]() || ty == reflect.TypeFor[Cost]() || ty == reflect.TypeFor[KeyPart]() {
				return
			}
			seen[ty] = true
			for _, f := range yamlFields(ty) {
				if !bytes.Contains(b, []byte("`"+f.name+"`")) {
					t.Errorf("%s does not mention `%s` (%s.%s)", doc, f.name, f.owner, f.sf.Name)
				}
				walk(f.sf.Type)
			}
		}
		walk(root)
	}
}
