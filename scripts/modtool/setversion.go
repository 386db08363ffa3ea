package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// setVersion makes every requirement of the published modules and the
// examples on floodgate's modules name version, and go.work replace each
// published module at version with its directory.
func (r *repo) setVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version such as v0.3.0", version)
	}
	for _, m := range append(slices.Clone(r.published), r.examples...) {
		changed := false
		for _, req := range m.file.Require {
			if r.isPublished(req.Mod.Path) && req.Mod.Version != version {
				if err := m.file.AddRequire(req.Mod.Path, version); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		m.file.Cleanup()
		data, err := m.file.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(r.root, m.dir, "go.mod"), data, 0o644); err != nil {
			return err
		}
	}
	name := filepath.Join(r.root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return err
	}
	// The replace lines are rewritten in place, so go.work keeps its
	// layout and comments; checkWork reports one that is missing.
	for _, rep := range wf.Replace {
		tok := rep.Syntax.Token
		if rep.Syntax.InBlock {
			tok = append([]string{"replace"}, tok...)
		}
		if r.isPublished(rep.Old.Path) && len(tok) == 5 && tok[2] == rep.Old.Version {
			if rep.Syntax.InBlock {
				rep.Syntax.Token[1] = version
			} else {
				rep.Syntax.Token[2] = version
			}
		}
	}
	wf.Cleanup()
	return os.WriteFile(name, modfile.Format(wf.Syntax), 0o644)
}
