package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// writeProxy writes every published module at version into the module
// proxy directory out (<module>/@v/{list,V.info,V.mod,V.zip}), made from
// the git revision rev, or from the work tree when rev is "". Versions
// already in out are kept.
func (r *repo) writeProxy(out, version, rev string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version such as v0.3.0", version)
	}
	when := time.Now().UTC()
	if rev != "" {
		t, err := git(r.root, "log", "-1", "--format=%ct", rev)
		if err != nil {
			return err
		}
		secs, err := strconv.ParseInt(strings.TrimSpace(string(t)), 10, 64)
		if err != nil {
			return err
		}
		when = time.Unix(secs, 0).UTC()
	}
	for _, m := range r.published {
		if err := r.writeModule(out, m, version, rev, when); err != nil {
			return fmt.Errorf("%s@%s: %w", m.path, version, err)
		}
	}
	return nil
}

func (r *repo) writeModule(out string, m mod, version, rev string, when time.Time) error {
	escPath, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mv := module.Version{Path: m.path, Version: version}
	base := filepath.Join(dir, escVersion)

	var gomod []byte
	if rev == "" {
		gomod, err = os.ReadFile(filepath.Join(r.root, m.dir, "go.mod"))
	} else {
		gomod, err = git(r.root, "show", rev+":"+path.Join(m.dir, "go.mod"))
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when})
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return err
	}

	zf, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if rev == "" {
		var files []zip.File
		files, err = r.workFiles(m)
		if err == nil {
			err = zip.Create(zf, mv, files)
		}
	} else {
		subdir := m.dir
		if subdir == "." {
			subdir = ""
		}
		err = zip.CreateFromVCS(zf, mv, r.root, rev, subdir)
	}
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	list := filepath.Join(dir, "list")
	old, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	return os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// workFiles lists the files of m in the work tree as a commit of it would
// hold them: tracked and new files that git does not ignore, outside the
// directories of other modules.
func (r *repo) workFiles(m mod) ([]zip.File, error) {
	out, err := git(r.root, "ls-files", "-co", "--exclude-standard", "-z", "--", m.dir)
	if err != nil {
		return nil, err
	}
	var nested []string
	for _, o := range r.all {
		if o.dir != m.dir && (m.dir == "." || strings.HasPrefix(o.dir, m.dir+"/")) {
			nested = append(nested, o.dir+"/")
		}
	}
	var files []zip.File
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" || slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(f, n) }) {
			continue
		}
		full := filepath.Join(r.root, filepath.FromSlash(f))
		fi, err := os.Lstat(full)
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			return nil, err
		}
		rel := f
		if m.dir != "." {
			rel = strings.TrimPrefix(f, m.dir+"/")
		}
		files = append(files, workFile{path: rel, full: full, info: fi})
	}
	return files, nil
}

// workFile is a file of the work tree as zip.Create reads it.
type workFile struct {
	path, full string
	info       os.FileInfo
}

func (f workFile) Path() string                 { return f.path }
func (f workFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f workFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }
