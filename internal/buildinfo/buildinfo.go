// Package buildinfo says which floodgate binary is running: its module
// version, the commit it was built from and whether the tree had changes,
// the commit's time and the Go version, as the Go toolchain stamped them
// into the binary (runtime/debug.ReadBuildInfo). `floodgate version` prints
// it and the daemon's floodgate_build_info gauge carries it.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Unknown stands for what the build did not record: a binary built
// without VCS stamping (-buildvcs=false, or outside a checkout) has no
// revision and no time.
const Unknown = "unknown"

// Info describes the running binary.
type Info struct {
	// Version is the main module's version: a release tag (v1.2.3), a
	// pseudo-version the toolchain derived from the checkout (with
	// "+dirty" when the tree had changes), or "(devel)".
	Version string `json:"version"`
	// Revision is the full commit hash (vcs.revision), Unknown if not
	// stamped.
	Revision string `json:"revision"`
	// Modified reports whether the checkout had uncommitted changes, untracked
	// files included (vcs.modified).
	Modified bool `json:"modified"`
	// Time is the commit's time, RFC 3339 (vcs.time), Unknown if not
	// stamped. It is when the source was committed, not when it was built:
	// the toolchain records no build time, so two builds of one commit
	// are the same binary.
	Time string `json:"time"`
	// GoVersion is the toolchain that built the binary (go1.26.1).
	GoVersion string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Read returns the running binary's Info.
func Read() Info {
	i := Info{Version: Unknown, Revision: Unknown, Time: Unknown, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if bi.Main.Version != "" {
		i.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		case "vcs.time":
			i.Time = s.Value
		}
	}
	return i
}

// ShortRevision is the first 12 hex digits of the revision (as git
// abbreviates it in a large repository), or the revision as it is when
// shorter (Unknown).
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the one-line form the daemon's banner starts with: version,
// short revision (with "-modified" when the tree had changes) and Go
// version.
func (i Info) String() string {
	s := i.Version
	if i.Revision != Unknown {
		s += " " + i.ShortRevision()
		if i.Modified {
			s += "-modified"
		}
	}
	return s + " " + i.GoVersion
}
