package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// rootPath is the main module's path; every module of the repository lies
// below it.
const rootPath = "github.com/floodgate-go/floodgate"

// A mod is one module of the repository.
type mod struct {
	dir  string // relative to the root, slash-separated; "." for the main module
	path string
	file *modfile.File
}

type repo struct {
	root      string // absolute
	published []mod  // the main module and contrib/*: tagged by every release
	examples  []mod  // examples/*: built against the published ones, never tagged
	all       []mod  // every module, bench and this tool included
}

// openRepo finds the modules of the repository at root: every go.mod git
// knows of, tracked or new.
func openRepo(root string) (*repo, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	out, err := git(abs, "ls-files", "-co", "--exclude-standard", "-z", "--", "go.mod", "*/go.mod")
	if err != nil {
		return nil, err
	}
	r := &repo{root: abs}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" || strings.Contains(f, "/testdata/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(abs, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, err
		}
		m := mod{dir: path.Dir(f), file: mf}
		if mf.Module != nil {
			m.path = mf.Module.Mod.Path
		}
		if want := path.Join(rootPath, m.dir); m.path != want {
			return nil, fmt.Errorf("%s: module %q, want %q: a module's path is its directory's", f, m.path, want)
		}
		r.all = append(r.all, m)
		switch {
		case m.dir == "." || path.Dir(m.dir) == "contrib":
			r.published = append(r.published, m)
		case path.Dir(m.dir) == "examples":
			r.examples = append(r.examples, m)
		}
	}
	// The main module first: the others require it.
	slices.SortStableFunc(r.published, func(a, b mod) int {
		return strings.Compare(strings.TrimPrefix(a.dir, "."), strings.TrimPrefix(b.dir, "."))
	})
	if len(r.published) == 0 || r.published[0].dir != "." {
		return nil, fmt.Errorf("%s: no go.mod at the root; run modtool in floodgate's repository", abs)
	}
	return r, nil
}

// isPublished reports whether p is the path of a published module.
func (r *repo) isPublished(p string) bool {
	return slices.ContainsFunc(r.published, func(m mod) bool { return m.path == p })
}

// check reports every go.mod of a published module or an example that a
// user's build could not resolve from the tags: a replace directive, a
// requirement on a module that is never tagged (a test-only one), a
// pseudo-version, or versions of floodgate's modules that disagree; and a
// go.work that does not stand the tree in for that version.
func (r *repo) check() error {
	var errs []error
	version := ""
	for _, m := range append(slices.Clone(r.published), r.examples...) {
		name := path.Join(m.dir, "go.mod")
		for _, rep := range m.file.Replace {
			errs = append(errs, fmt.Errorf("%s: replace %s: a user's build ignores it, so the module does not build as published; drop it (go.work serves development)", name, rep.Old.Path))
		}
		for _, req := range m.file.Require {
			p, v := req.Mod.Path, req.Mod.Version
			if p != rootPath && !strings.HasPrefix(p, rootPath+"/") {
				continue
			}
			switch {
			case !r.isPublished(p):
				errs = append(errs, fmt.Errorf("%s: requires %s, which no release tags; a published module may require only the main module and contrib/*", name, p))
			case module.IsPseudoVersion(v):
				errs = append(errs, fmt.Errorf("%s: requires %s@%s, a pseudo-version; require the release version (scripts/release.sh sets it)", name, p, v))
			case version == "":
				version = v
			case v != version:
				errs = append(errs, fmt.Errorf("%s: requires %s@%s where other modules require %s; floodgate's modules are released together at one version", name, p, v, version))
			}
		}
	}
	errs = append(errs, r.checkWork(version)...)
	return errors.Join(errs...)
}

// checkWork checks that go.work uses every module but bench and this tool,
// and replaces each published module at version with its directory.
func (r *repo) checkWork(version string) []error {
	data, err := os.ReadFile(filepath.Join(r.root, "go.work"))
	if err != nil {
		return []error{err}
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, m := range append(slices.Clone(r.published), r.examples...) {
		if !slices.ContainsFunc(wf.Use, func(u *modfile.Use) bool { return path.Clean(u.Path) == m.dir }) {
			errs = append(errs, fmt.Errorf("go.work: no use of ./%s; add it (go work use ./%s)", m.dir, m.dir))
		}
	}
	if version == "" {
		return errs
	}
	for _, m := range r.published {
		ok := slices.ContainsFunc(wf.Replace, func(rep *modfile.Replace) bool {
			return rep.Old.Path == m.path && rep.Old.Version == version && path.Clean(rep.New.Path) == m.dir
		})
		if !ok {
			errs = append(errs, fmt.Errorf("go.work: no replace %s %s => ./%s; development builds would fetch the release instead of the tree", m.path, version, m.dir))
		}
	}
	return errs
}

// version returns the version the modules require of one another.
func (r *repo) version() (string, error) {
	for _, m := range append(slices.Clone(r.published), r.examples...) {
		for _, req := range m.file.Require {
			if r.isPublished(req.Mod.Path) {
				return req.Mod.Version, nil
			}
		}
	}
	return "", errors.New("no module requires another of floodgate's")
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
