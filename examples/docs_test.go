package examples_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// notCompiled, on the line before a fence, exempts a block from
// TestDocsCompile. It is for text that is deliberately not Go (a sketch of
// a diff, output), never for a snippet of the API.
const notCompiled = "<!-- not compiled -->"

// docPackages are the packages a fragment may use without importing them:
// a fragment gets an import for each of these names it uses as "name.".
var docPackages = map[string]string{
	"floodgate":     "github.com/floodgate-go/floodgate",
	"algo":          "github.com/floodgate-go/floodgate/algo",
	"clientip":      "github.com/floodgate-go/floodgate/clientip",
	"failover":      "github.com/floodgate-go/floodgate/failover",
	"floodgatetest": "github.com/floodgate-go/floodgate/floodgatetest",
	"httplimit":     "github.com/floodgate-go/floodgate/httplimit",
	"httpmatch":     "github.com/floodgate-go/floodgate/httpmatch",
	"quick":         "github.com/floodgate-go/floodgate/httplimit/quick",
	"hybrid":        "github.com/floodgate-go/floodgate/hybrid",
	"memstore":      "github.com/floodgate-go/floodgate/memstore",
	"redisstore":    "github.com/floodgate-go/floodgate/redisstore",
	"metrics":       "github.com/floodgate-go/floodgate/metrics",
	"config":        "github.com/floodgate-go/floodgate/config",
	"daemon":        "github.com/floodgate-go/floodgate/daemon",
	"checkapi":      "github.com/floodgate-go/floodgate/checkapi",
	"envoyrls":      "github.com/floodgate-go/floodgate/envoyrls",
	"envoyrules":    "github.com/floodgate-go/floodgate/envoyrules",
	"testkit":       "github.com/floodgate-go/floodgate/testkit",
	"pgproxy":       "github.com/floodgate-go/floodgate/pgproxy",
	"concurrency":   "github.com/floodgate-go/floodgate/concurrency",
	"redislease":    "github.com/floodgate-go/floodgate/concurrency/redislease",
	"adaptive":      "github.com/floodgate-go/floodgate/concurrency/adaptive",
	"throttle":      "github.com/floodgate-go/floodgate/concurrency/throttle",
	"clock":         "github.com/floodgate-go/floodgate/clock",
	"lease":         "github.com/floodgate-go/floodgate/lease",
	"outbound":      "github.com/floodgate-go/floodgate/outbound",
	"tokencost":     "github.com/floodgate-go/floodgate/tokencost",
	"override":      "github.com/floodgate-go/floodgate/override",
	"prometheus":    "github.com/prometheus/client_golang/prometheus",
	"promhttp":      "github.com/prometheus/client_golang/prometheus/promhttp",
	"redis":         "github.com/redis/go-redis/v9",
	"context":       "context",
	"errors":        "errors",
	"fmt":           "fmt",
	"http":          "net/http",
	"httptest":      "net/http/httptest",
	"io":            "io",
	"log":           "log",
	"net":           "net",
	"os":            "os",
	"slog":          "log/slog",
	"strings":       "strings",
	"sync":          "sync",
	"time":          "time",
}

// docEnv are the names a fragment may use without declaring them: what the
// surrounding text says the reader already has. A fragment that uses one
// gets it as a parameter of the function it is wrapped in, so that it is
// never "declared and not used"; every name the fragment declares itself
// is checked as the compiler would.
var docEnv = map[string]string{
	"ctx":                "context.Context",
	"mux":                "*http.ServeMux",
	"handler":            "http.Handler",
	"hello":              "http.Handler",
	"client":             "*redis.Client",
	"budget":             "floodgate.Limiter",
	"slots":              "*concurrency.Limiter",
	"store":              "floodgate.Store",
	"callThePaymentsAPI": "func(context.Context) error",
	"addr":               "string",
	"api":                "floodgate.Limiter",
	"lim":                "floodgate.Limiter",
	"reg":                "prometheus.Registerer",
	"m":                  "*metrics.Metrics",
	"rs":                 "floodgate.Store",
	"local":              "*memstore.Store",
	"mem":                "*memstore.Store",
}

// A docBlock is one fenced Go block of a Markdown file.
type docBlock struct {
	file string // path relative to the module root, e.g. "docs/keys.md"
	line int    // line of the first line of code
	code string
}

// docBlocks returns the ```go blocks of the Markdown files, with those
// marked notCompiled left out.
func docBlocks(t *testing.T, root string, files []string) []docBlock {
	t.Helper()
	var blocks []docBlock
	for _, name := range files {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		var (
			in, skip bool
			prev     string // the last non-blank line outside a block
			b        docBlock
			code     strings.Builder
		)
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			trimmed := strings.TrimSpace(line)
			switch {
			case !in && strings.HasPrefix(trimmed, "```"):
				in = true
				skip = strings.TrimSpace(strings.TrimPrefix(trimmed, "```")) != "go" || prev == notCompiled
				b = docBlock{file: name, line: n + 1}
				code.Reset()
			case in && trimmed == "```":
				in = false
				if !skip {
					b.code = code.String()
					blocks = append(blocks, b)
				}
			case in:
				code.WriteString(line)
				code.WriteByte('\n')
			case trimmed != "":
				prev = trimmed
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if in {
			t.Errorf("%s: a code block opened at line %d is never closed", name, b.line-1)
		}
	}
	return blocks
}

// usedPackages returns the import paths of the docPackages code refers to
// as "name.X", in the order of first use.
func usedPackages(code string) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(code)
	s.Init(fset.AddFile("", -1, len(src)), src, nil, 0)
	var paths []string
	var last [2]token.Token
	var lastLit string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return paths
		}
		// IDENT PERIOD IDENT, where the first is not itself a selector
		// (x.time.Now is a field, not the package).
		if tok == token.IDENT && last[1] == token.PERIOD && last[0] == token.IDENT {
			if p, ok := docPackages[lastLit]; ok && !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
		if tok == token.IDENT {
			if last[1] == token.PERIOD {
				lastLit = "" // a selector's field, never a package
			} else {
				lastLit = lit
			}
		}
		last[0], last[1] = last[1], tok
	}
}

// docSource turns a block into a Go file. A block that starts with
// "package" is a file already. A fragment of declarations only is placed at
// the top level; any other fragment becomes the body of a function that
// returns an error (so that "return err" works), with the docEnv names it
// uses as parameters. //line comments keep positions in the Markdown file.
func docSource(b docBlock, pkg string, env []string) (string, error) {
	trimmed := strings.TrimSpace(b.code)
	if strings.HasPrefix(trimmed, "package ") {
		return fmt.Sprintf("//line %s:%d\n%s", b.file, b.line, b.code), nil
	}
	var src strings.Builder
	fmt.Fprintf(&src, "package %s\n\nimport (\n", pkg)
	imports := usedPackages(b.code)
	for _, name := range env {
		if p, ok := docPackages[strings.TrimLeft(strings.Split(docEnv[name], ".")[0], "*")]; ok && !slices.Contains(imports, p) {
			imports = append(imports, p)
		}
	}
	for _, p := range imports {
		fmt.Fprintf(&src, "\t%q\n", p)
	}
	src.WriteString(")\n\n")
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+b.code, parser.SkipObjectResolution); err == nil {
		fmt.Fprintf(&src, "//line %s:%d\n%s", b.file, b.line, b.code)
		return src.String(), nil
	}
	var params []string
	for _, name := range env {
		params = append(params, name+" "+docEnv[name])
	}
	fmt.Fprintf(&src, "func _(%s) error {\n//line %s:%d\n%s\n\treturn nil\n}\n", strings.Join(params, ", "), b.file, b.line, b.code)
	return src.String(), nil
}

var undefinedRE = regexp.MustCompile(`^undefined: (\w+)$`)

// checkBlock type-checks one block, the way the compiler would, except that
// an unused import is not an error: fragments get every import their
// "name." uses suggest. Undefined names from docEnv are supplied and the
// block checked again.
func checkBlock(b docBlock, pkg string, imp types.Importer) []error {
	var env []string
	for {
		src, err := docSource(b, pkg, env)
		if err != nil {
			return []error{err}
		}
		fset := token.NewFileSet()
		// The //line comments name the Markdown file relative to the
		// directory of this name: the module root.
		f, err := parser.ParseFile(fset, "doc.go", src, parser.AllErrors|parser.SkipObjectResolution)
		if err != nil {
			return []error{fmt.Errorf("%v\n--- as compiled:\n%s", err, src)}
		}
		var errs []error
		var missing []string
		conf := types.Config{
			Importer: imp,
			Error: func(err error) {
				te := err.(types.Error)
				if strings.HasSuffix(te.Msg, "imported and not used") {
					return
				}
				if m := undefinedRE.FindStringSubmatch(te.Msg); m != nil {
					if _, ok := docEnv[m[1]]; ok && !slices.Contains(env, m[1]) {
						missing = append(missing, m[1])
						return
					}
				}
				errs = append(errs, err)
			},
		}
		conf.Check(pkg, fset, []*ast.File{f}, nil)
		if len(missing) > 0 {
			env = append(env, missing...)
			sort.Strings(env)
			env = slices.Compact(env)
			continue
		}
		if len(errs) > 0 {
			errs = append(errs, fmt.Errorf("--- as compiled:\n%s", src))
		}
		return errs
	}
}

// exportImporter returns an importer that reads the compiler's export data
// of the packages paths need, as go list -export builds it (from the build
// cache when nothing changed), so that checking the docs costs seconds, not
// a type-check of net/http from source.
func exportImporter(t *testing.T, root string, paths []string) types.Importer {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build export data: %v", err)
	}
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, paths...)
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	export := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if p, file, ok := strings.Cut(strings.TrimSpace(line), " "); ok && file != "" {
			export[p] = file
		}
	}
	fset := token.NewFileSet()
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q: add it to docPackages or import it in the block", path)
		}
		return os.Open(file)
	})
}

// TestDocsCompile type-checks every Go block of README.md and docs/*.md
// against the packages as they are, so that the documentation cannot show
// an API that does not exist or code that does not compile.
func TestDocsCompile(t *testing.T) {
	root := ".."
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	blocks := docBlocks(t, root, files)
	if len(blocks) == 0 {
		t.Fatal("no Go blocks found in the documentation")
	}

	need := map[string]bool{}
	for _, p := range docPackages {
		need[p] = true
	}
	for _, b := range blocks {
		if f, err := parser.ParseFile(token.NewFileSet(), "", b.code, parser.ImportsOnly); err == nil {
			for _, s := range f.Imports {
				need[strings.Trim(s.Path.Value, `"`)] = true
			}
		}
	}
	paths := make([]string, 0, len(need))
	for p := range need {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	imp := exportImporter(t, root, paths)

	for i, b := range blocks {
		t.Run(fmt.Sprintf("%s:%d", b.file, b.line), func(t *testing.T) {
			for _, err := range checkBlock(b, fmt.Sprintf("doc%d", i), imp) {
				t.Error(err)
			}
		})
	}
}

// The checker itself: what it must reject and what it must let through.
func TestDocsCompileChecker(t *testing.T) {
	root := ".."
	imp := exportImporter(t, root, []string{"context", "fmt", "net/http", "time", "github.com/floodgate-go/floodgate/memstore", "github.com/floodgate-go/floodgate"})
	cases := []struct {
		name, code string
		wantErr    string // "" means it must compile
	}{
		{"unused variable", "x, err := fmt.Println()\n_ = x\n", "declared and not used: err"},
		{"undefined API", "floodgate.PerFortnight(3)\n", "undefined: floodgate.PerFortnight"},
		{"env name supplied", "res, err := http.Get(addr)\n_ = res\nreturn err\n", ""},
		{"env name redeclared", "ctx := context.Background()\n_ = ctx\n", ""},
		{"top-level declarations", "type key struct{}\n\nfunc f() time.Duration { return time.Second }\n", ""},
		{"file", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println() }\n", ""},
		{"file with unused variable", "package main\n\nfunc main() { x := 1 }\n", "declared and not used: x"},
		{"memstore", "store := memstore.New(memstore.Options{})\ndefer store.Close()\n", ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := checkBlock(docBlock{file: "case.md", line: 1, code: c.code}, fmt.Sprintf("case%d", i), imp)
			switch {
			case c.wantErr == "" && len(errs) > 0:
				t.Errorf("got errors, want none: %v", errs)
			case c.wantErr != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), c.wantErr)):
				t.Errorf("got %v, want an error containing %q", errs, c.wantErr)
			}
		})
	}
}

func TestDocBlocksOptOut(t *testing.T) {
	dir := t.TempDir()
	md := "# t\n\n```go\nx := 1\n```\n\n" + notCompiled + "\n\n```go\nnot go\n```\n\n```sh\nls\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, dir, []string{"a.md"})
	if len(blocks) != 1 || blocks[0].code != "x := 1\n" || blocks[0].line != 4 {
		t.Fatalf("got %+v, want only the first block, at line 4", blocks)
	}
}
