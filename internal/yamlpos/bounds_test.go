package yamlpos

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A hostile file is refused at the line where it crosses a bound, before
// the parser sees it: the parser's memory grows with the square of the
// nesting (a 300 KB file of brackets took gigabytes) and of the fields of
// one block mapping.
func TestParseRefusesBeyondBounds(t *testing.T) {
	var fields strings.Builder
	fields.WriteString("policies:\n")
	for i := range 2 * MaxBlockFields {
		fmt.Fprintf(&fields, "  p%d: 1\n", i)
	}
	for _, tc := range []struct {
		name, data, at, msg string
	}{
		{"flow depth 40000 in an x- field", "proxy: {}\nx-junk: " + strings.Repeat("[", 40_000) + "\n", "f.yaml:2:72", "nested more than 64 levels"},
		{"flow depth 100000 over lines", "a: 1\nb:\n" + strings.Repeat("  "+strings.Repeat("{a: ", 10)+"\n", 10_000), "f.yaml:9:", "nested more than 64 levels"},
		{"block sequences 100000 deep", "x-a:\n  " + strings.Repeat("- ", 100_000) + "1\n", "f.yaml:2:", "nested more than 64 levels"},
		{"block indentation", func() string {
			var b strings.Builder
			for i := range 200 {
				b.WriteString(strings.Repeat(" ", i) + "k:\n")
			}
			return b.String()
		}(), "f.yaml:65:65", "nested more than 64 levels"},
		{"a flat list of 500000", "x-a: [" + strings.Repeat("1,", 500_000) + "]\n", "f.yaml:1:", "more than 250000 values"},
		{"a block list", "x-a:\n" + strings.Repeat("- 1\n", 300_000), "f.yaml:125001:3", "more than 250000 values"}, // "- 1" is two values,
		{"8000 fields in one block mapping", fields.String(), "f.yaml:4002:3", "more than 4000 fields"},
		{"8 MiB", "x-a: |\n" + strings.Repeat("  "+strings.Repeat("a", 98)+"\n", 80_000),
			fmt.Sprintf("f.yaml:%d:1", 2+(MaxFileBytes-7)/101), "larger than 4194304 bytes"}, // lines of 101 bytes after one of 7
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New("f.yaml")
			n := allocated(func() { d.Parse([]byte(tc.data)) })
			if len(d.Errs) != 1 {
				t.Fatalf("errors %v, want one", d.Errs)
			}
			got := d.Errs[0].Error()
			if !strings.HasPrefix(got, tc.at) || !strings.Contains(got, tc.msg) {
				t.Errorf("error %q, want it at %s saying %q", got, tc.at, tc.msg)
			}
			if n > 8<<20 {
				t.Errorf("refusing it allocated %d MB, want under 8", n>>20)
			}
		})
	}
}

// Within the bounds the parser takes a few hundred megabytes at most (the
// largest file and the most values; tens for the rest).
func TestParseWithinBounds(t *testing.T) {
	var fields strings.Builder
	fields.WriteString("policies:\n")
	for i := range MaxBlockFields {
		fmt.Fprintf(&fields, "  p%d: 1\n", i)
	}
	var flowMap strings.Builder
	flowMap.WriteString("overrides: {")
	for i := range 5000 {
		fmt.Fprintf(&flowMap, "user%d: 1, ", i)
	}
	flowMap.WriteString("}\n")
	for name, data := range map[string]string{
		"deepest":             "x-a: " + strings.Repeat("[", MaxNesting-1) + strings.Repeat("]", MaxNesting-1) + "\n",
		"most block fields":   fields.String(),
		"a long flow mapping": flowMap.String(),
		"most values":         "x-a: [" + strings.Repeat("1,", MaxValues-2) + "]\n",
		"largest":             "x-a: \"" + strings.Repeat("a", MaxFileBytes-16) + "\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			d := New("f.yaml")
			var body any
			n := allocated(func() { body = d.Parse([]byte(data)) })
			if len(d.Errs) != 0 || body == nil {
				t.Fatalf("refused: %v", d.Errs)
			}
			if n > 512<<20 {
				t.Errorf("parsing allocated %d MB, want under 512", n>>20)
			}
		})
	}
}

// Every YAML file of the repository (examples, test data, the default
// configuration, the YAML blocks of the docs) is well within the bounds.
func TestBoundsTakeTheRepositorysFiles(t *testing.T) {
	root := "../.."
	n := 0
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".git" || e.Name() == "node_modules") {
			return filepath.SkipDir
		}
		ext := filepath.Ext(p)
		if e.IsDir() || ext != ".yaml" && ext != ".yml" && ext != ".md" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		docs := [][]byte{b}
		if ext == ".md" {
			docs = nil
			for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
				block, _, _ := strings.Cut(part, "```")
				docs = append(docs, []byte(block))
			}
		}
		for _, doc := range docs {
			n++
			if err := CheckBounds(p, doc); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("checked %d files, expected the repository's", n)
	}
}

func TestReadFileStopsPastTheBound(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(p, make([]byte, 3*MaxFileBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFile(p)
	if err != nil || len(b) != MaxFileBytes+1 {
		t.Fatalf("read %d bytes, %v; want %d", len(b), err, MaxFileBytes+1)
	}
}
