package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds, and where.
const (
	binaryPath   = "/usr/local/bin/floodgate"
	configPath   = "/etc/floodgate/floodgate.yaml"
	configSource = "deploy/image/floodgate.yaml" // in the repository: the file put at configPath
	user         = "65532:65532"                 // nonroot in the image's /etc/passwd
	mainPackage  = "./cmd/floodgate"
)

// ports are the listeners of deploy/image/floodgate.yaml: the proxy, the
// check API and the admin listener (the test checks that they agree).
var ports = []string{"8080/tcp", "8081/tcp", "9090/tcp"}

// healthcheck is the image's HEALTHCHECK: floodgate health asks the admin
// listener (deploy/image/floodgate.yaml's :9090, reached on loopback inside
// the container) for /healthz, the process serving. Not /readyz: a Redis
// outage under fail_closed is no reason to restart a container. Its
// Timeout leaves room for the command's own (2s).
var healthcheck = v1.HealthConfig{
	Test:        []string{"CMD", binaryPath, "health", "-addr", "http://127.0.0.1:9090"},
	Interval:    30 * time.Second,
	Timeout:     5 * time.Second,
	StartPeriod: 10 * time.Second,
	Retries:     3,
}

// The image's only accounts: no shell for either.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// archs are the GOARCH values that are also OCI architectures as they are
// (arm and 386 would need a variant or a different name).
var archs = []string{"amd64", "arm64", "ppc64le", "riscv64", "s390x"}

// tagPattern is the OCI distribution specification's tag.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

type options struct {
	root     string // the repository's root
	out      string // the OCI image layout directory
	tag      string
	arch     string
	archive  string // if set, the layout as an OCI archive too
	licenses string // SPDX expression; required with a LICENSE file
	warn     io.Writer
}

// result is what build made.
type result struct {
	digest  v1.Hash // the image manifest's
	version string  // the binary's module version, as `floodgate version` prints it
}

func build(o options) (result, error) {
	if o.warn == nil {
		o.warn = io.Discard
	}
	if !tagPattern.MatchString(o.tag) {
		return result{}, fmt.Errorf("-tag %q is not a valid tag (letters, digits, _ . -, at most 128, not starting with . or -)", o.tag)
	}
	if !slices.Contains(archs, o.arch) {
		return result{}, fmt.Errorf("-arch %q: want one of %s", o.arch, strings.Join(archs, ", "))
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return result{}, err
	}
	if _, err := os.Stat(filepath.Join(root, mainPackage)); err != nil {
		return result{}, fmt.Errorf("-root %s is not floodgate's repository: %w", o.root, err)
	}
	config, err := os.ReadFile(filepath.Join(root, configSource))
	if err != nil {
		return result{}, err
	}
	if o.licenses == "" {
		for _, name := range []string{"LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING"} {
			if _, err := os.Stat(filepath.Join(root, name)); err == nil {
				return result{}, fmt.Errorf("%s exists: name its SPDX expression with -licenses, for the org.opencontainers.image.licenses label", name)
			}
		}
	}
	created, err := sourceTime(root, o.warn)
	if err != nil {
		return result{}, err
	}

	tmp, err := os.MkdirTemp("", "floodgate-image")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "floodgate")
	if err := goBuild(root, o.arch, bin); err != nil {
		return result{}, err
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return result{}, err
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return result{}, fmt.Errorf("the built binary: %w", err)
	}

	rootfs, err := rootFS(created, binary, config)
	if err != nil {
		return result{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(rootfs)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return result{}, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "scripts/image: " + binaryPath + ", " + configPath + ", /etc/passwd, /etc/group",
		},
	})
	if err != nil {
		return result{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return result{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Created = v1.Time{Time: created}
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"serve", configPath},
		// floodgate key, explain and check by name in podman exec.
		Env:          []string{"PATH=" + filepath.Dir(binaryPath)},
		WorkingDir:   "/",
		ExposedPorts: exposed,
		StopSignal:   "SIGTERM", // the daemon drains on it
		Healthcheck:  &healthcheck,
		Labels:       labels(bi, created, revision(root, o.warn), o.licenses),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return result{}, err
	}
	if err := writeLayout(o.out, img, o.tag, o.arch); err != nil {
		return result{}, err
	}
	if o.archive != "" {
		if err := writeArchive(o.out, o.archive, created); err != nil {
			return result{}, err
		}
	}
	return result{digest: digest, version: bi.Main.Version}, nil
}

// goBuild builds a static floodgate for linux/arch at out, as a user's
// build sees the module (GOWORK=off), the same bytes from the same source
// and toolchain wherever it is built.
func goBuild(root, arch, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w -buildid=", "-o", out, mainPackage)
	cmd.Dir = root
	// GOFLAGS is set, not inherited: an empty one would let the user's go
	// env file add flags (-buildvcs=false, -race) to the build.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", mainPackage, err, out)
	}
	return nil
}

// sourceTime is every timestamp of the image: SOURCE_DATE_EPOCH if set,
// else the commit time of HEAD, else the Unix epoch (not a git checkout).
func sourceTime(root string, warn io.Writer) (time.Time, error) {
	if s, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a whole number of seconds since 1970", s)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	out, err := git(root, "log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		fmt.Fprintf(warn, "image: no commit time (%v); the image's timestamps are 1970-01-01 unless SOURCE_DATE_EPOCH is set\n", err)
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: commit time %q: %v", out, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// revision is HEAD's commit, or "" outside a git checkout.
func revision(root string, warn io.Writer) string {
	rev, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		fmt.Fprintf(warn, "image: no revision (%v); the image has no org.opencontainers.image.revision label\n", err)
		return ""
	}
	if st, err := git(root, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		fmt.Fprintf(warn, "image: the work tree has uncommitted changes; the revision label names %s, which is not what was built\n", rev)
	}
	return rev
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// labels are the image's OCI annotations as config labels.
func labels(bi *buildinfo.BuildInfo, created time.Time, rev, licenses string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "floodgate",
		"org.opencontainers.image.description": "floodgate, the rate-limiting daemon",
		"org.opencontainers.image.version":     bi.Main.Version,
		"org.opencontainers.image.source":      "https://" + bi.Main.Path,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if rev != "" {
		l["org.opencontainers.image.revision"] = rev
	}
	if licenses != "" {
		l["org.opencontainers.image.licenses"] = licenses
	}
	return l
}

// rootFS is the image's one layer: the binary, the configuration, the
// accounts and the directories that hold them, owned by root, every time
// the same.
func rootFS(mtime time.Time, binary, config []byte) ([]byte, error) {
	type entry struct {
		name string
		mode int64
		data []byte // nil for a directory
	}
	entries := []entry{
		{"etc/", 0o755, nil},
		{"etc/floodgate/", 0o755, nil},
		{"etc/floodgate/floodgate.yaml", 0o644, config},
		{"etc/group", 0o644, []byte(group)},
		{"etc/passwd", 0o644, []byte(passwd)},
		{"tmp/", 0o1777, nil},
		{"usr/", 0o755, nil},
		{"usr/local/", 0o755, nil},
		{"usr/local/bin/", 0o755, nil},
		{"usr/local/bin/floodgate", 0o755, binary},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Format: tar.FormatPAX}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeLayout writes img to dir as an OCI image layout naming it
// floodgate:tag (podman load names it localhost/floodgate:tag). A layout
// already there is replaced; anything else is left alone.
func writeLayout(dir string, img v1.Image, tag, arch string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("-out %s holds files but no OCI image layout; not replacing it", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img,
		layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName(tag)}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
}

// refName is the name the layout gives the image.
func refName(tag string) string { return "floodgate:" + tag }

// writeArchive writes the layout at dir as an OCI archive (a tar of the
// layout), with the files in name order and every time mtime.
func writeArchive(dir, file string, mtime time.Time) error {
	f, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}
