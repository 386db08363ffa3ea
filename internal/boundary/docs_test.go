package boundary

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conflictMarker reports whether line opens, splits (diff3) or closes a
// merge conflict as git writes one: seven markers, then a space and a label
// or the end of the line. "=======" alone is left out: it is also a
// heading's underline, and a conflict that has one has the other two.
func conflictMarker(line string) bool {
	for _, m := range []string{"<<<<<<<", "|||||||", ">>>>>>>"} {
		if line == m || strings.HasPrefix(line, m+" ") {
			return true
		}
	}
	return false
}

// TestDocsHaveNoConflictMarkers fails on a merge conflict left in any
// Markdown file of the repository.
func TestDocsHaveNoConflictMarkers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository's root %s has no go.mod: %v", root, err)
	}
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		n++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			if conflictMarker(sc.Text()) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: merge conflict marker %q: resolve the conflict", rel, line, sc.Text())
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("found no Markdown file to check")
	}
}

func TestConflictMarker(t *testing.T) {
	for line, want := range map[string]bool{
		"<<<<<<< HEAD": true, ">>>>>>> breaker": true, "||||||| base": true, "<<<<<<<": true,
		"=======": false, "<<<<<<<<": false, "text <<<<<<< HEAD": false, "": false,
	} {
		if got := conflictMarker(line); got != want {
			t.Errorf("conflictMarker(%q) = %v, want %v", line, got, want)
		}
	}
}
