package boundary

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const modulePath = "github.com/floodgate-go/floodgate"

// repoTree lists the repository's files and directories (slash-separated,
// relative to the root), its Go packages by directory and by name, and its
// top-level directories. Hidden directories and node_modules are left out.
type repoTree struct {
	paths    map[string]bool // every file and directory
	pkgDirs  map[string]bool // directories holding a .go file
	pkgNames map[string]bool // last element of each package directory
	top      map[string]bool // top-level directories
}

func readTree(t *testing.T, root string) *repoTree {
	t.Helper()
	rt := &repoTree{paths: map[string]bool{}, pkgDirs: map[string]bool{}, pkgNames: map[string]bool{}, top: map[string]bool{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if rel != "." {
				rt.paths[rel] = true
				if !strings.Contains(rel, "/") {
					rt.top[rel] = true
				}
			}
			return nil
		}
		rt.paths[rel] = true
		if strings.HasSuffix(rel, ".go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			rt.pkgDirs[dir] = true
			rt.pkgNames[filepath.Base(dir)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// resolves reports whether p, a path written in a doc, names something in
// the tree: from the root, or from a package's directory (a doc about
// redisstore says `scripts/reserve.lua`).
func (rt *repoTree) resolves(p string) bool {
	p = strings.TrimSuffix(p, "/")
	if rt.paths[p] {
		return true
	}
	for q := range rt.paths {
		if strings.HasSuffix(q, "/"+p) {
			return true
		}
	}
	return false
}

var (
	// modulePathRe finds floodgate's own import paths.
	modulePathRe = regexp.MustCompile(regexp.QuoteMeta(modulePath) + `((?:/[A-Za-z0-9_.-]+)*)`)
	// packageRe finds "(package P)" and "(package P/Q)", the way comments
	// and docs name the package that does a job.
	packageRe = regexp.MustCompile(`\(package ([a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*)\)`)
	// backtickPathRe finds `dir/...` in Markdown.
	backtickPathRe = regexp.MustCompile("`([a-z][a-z0-9_-]*/[A-Za-z0-9_./-]*)`")
)

// deadNames returns what text names that the tree does not have: an
// import path of the module with no package, a "(package P)" with no
// package of that name or path, and, in Markdown, a `dir/...` path under
// one of the repository's top-level directories that does not exist.
func (rt *repoTree) deadNames(text string, markdown bool) []string {
	var dead []string
	for _, m := range modulePathRe.FindAllStringSubmatch(text, -1) {
		p := strings.TrimSuffix(strings.TrimPrefix(m[1], "/"), ".")
		if p != "" && !rt.pkgDirs[p] {
			dead = append(dead, m[0])
		}
	}
	for _, m := range packageRe.FindAllStringSubmatch(text, -1) {
		if !rt.pkgDirs[m[1]] && !rt.pkgNames[m[1]] {
			dead = append(dead, m[0])
		}
	}
	if markdown {
		for _, m := range backtickPathRe.FindAllStringSubmatch(text, -1) {
			first, _, _ := strings.Cut(m[1], "/")
			if rt.top[first] && !rt.resolves(m[1]) {
				dead = append(dead, "`"+m[1]+"`")
			}
		}
	}
	return dead
}

// TestNoDeadPackageNames fails on a doc or comment that names a package,
// import path or repository path that no longer exists: a package that was
// moved or renamed leaves such names behind, and a reader follows them.
func TestNoDeadPackageNames(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rt := readTree(t, root)
	if !rt.pkgDirs["pgproxy"] || !rt.top["docs"] {
		t.Fatalf("the tree read from %s lacks pgproxy or docs: not the repository's root", root)
	}
	checked := 0
	for rel := range rt.paths {
		md := strings.HasSuffix(rel, ".md")
		if !md && !strings.HasSuffix(rel, ".go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		checked++
		text := string(b)
		if !md {
			text = goComments(text)
		}
		for _, d := range rt.deadNames(text, md) {
			t.Errorf("%s: %s names nothing in the repository: point it at the package or path that does this now", rel, d)
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d files: expected the whole repository", checked)
	}
}

// goComments returns the // comments of Go source, one per line. Only
// comments speak about packages in prose; code names them in import
// paths, which the compiler already checks.
func goComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "//"); i >= 0 && !strings.Contains(line[:i], `"`) {
			b.WriteString(line[i:])
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func TestDeadNames(t *testing.T) {
	rt := &repoTree{
		paths:    map[string]bool{"redisstore": true, "redisstore/scripts": true, "redisstore/scripts/reserve.lua": true, "docs": true, "daemon": true},
		pkgDirs:  map[string]bool{"redisstore": true, "daemon": true, "cmd/floodgate": true},
		pkgNames: map[string]bool{"redisstore": true, "daemon": true, "floodgate": true},
		top:      map[string]bool{"redisstore": true, "docs": true, "daemon": true},
	}
	for text, want := range map[string]int{
		"listeners (package server) over":                1,
		"the engines (package redisstore) keep":          0,
		"import " + modulePath + "/redisstore.":          0,
		"import " + modulePath + "/server":               1,
		"go install " + modulePath + "/cmd/floodgate@v1": 0,
		"go install " + modulePath + "/cmd/other":        1,
		"see `redisstore/scripts/reserve.lua`":           0,
		"see `scripts/reserve.lua`":                      0,
		"see `redisstore/old.lua` and `src/x/y.go`":      1,
		"see `docs/` and `daemon/`":                      0,
	} {
		if got := rt.deadNames(text, true); len(got) != want {
			t.Errorf("deadNames(%q) = %q, want %d", text, got, want)
		}
	}
}
