package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/buildinfo"
	"github.com/floodgate-go/floodgate/testkit"
)

// gitCheckout copies the module's source (tracked and untracked files, as
// `git ls-files` lists them) into a new git repository with one commit,
// and returns its directory and commit. Go stamps a build with the
// repository it finds by its .git directory; a linked worktree's .git is a
// file, which the toolchain does not take for a repository, so the test
// builds from a checkout of its own rather than from wherever it runs.
func gitCheckout(t *testing.T) (dir, commit string) {
	t.Helper()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=floodgate test", "-c", "user.email=test@localhost"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	src := git(".", "rev-parse", "--show-toplevel")
	dir = t.TempDir()
	for _, f := range strings.Split(git(src, "ls-files", "-co", "--exclude-standard", "-z"), "\x00") {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(dir, "init", "-q")
	git(dir, "add", "-A")
	git(dir, "commit", "-q", "-m", "the tree under test")
	return dir, git(dir, "rev-parse", "HEAD")
}

// buildVCS builds cmd/floodgate in dir with VCS stamping on, whatever
// GOFLAGS says.
func buildVCS(t *testing.T, dir, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", out, "./cmd/floodgate")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, b)
	}
}

func versionOf(t *testing.T, bin string) (buildinfo.Info, string) {
	t.Helper()
	js, err := exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("floodgate version -json: %v", err)
	}
	var i buildinfo.Info
	if err := json.Unmarshal(js, &i); err != nil {
		t.Fatalf("floodgate version -json printed %q: %v", js, err)
	}
	text, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("floodgate version: %v", err)
	}
	return i, string(text)
}

// TestVersionFromCheckout: a binary built from a git checkout says which
// commit it is, whether the tree had changes, the commit's time and the Go
// version, in words and in JSON; and the daemon's floodgate_build_info
// carries the same version, commit and Go version.
func TestVersionFromCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command twice from a copy of the tree; make test runs it")
	}
	dir, commit := gitCheckout(t)
	bin := filepath.Join(t.TempDir(), "floodgate")
	buildVCS(t, dir, bin)
	out, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	secs, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	committed := time.Unix(secs, 0).UTC().Format(time.RFC3339)
	goVersion := strings.TrimSpace(mustOutput(t, "go", "env", "GOVERSION"))

	i, text := versionOf(t, bin)
	want := buildinfo.Info{Revision: commit, Modified: false, Time: committed, GoVersion: goVersion, Platform: i.Platform}
	// The toolchain derives a pseudo-version from the commit
	// (v0.0.0-20261207065505-10ad6863dc8e) when no tag names it.
	if !strings.HasSuffix(i.Version, "-"+commit[:12]) {
		t.Errorf("version %q does not end in the commit, -%s", i.Version, commit[:12])
	}
	want.Version = i.Version
	if i != want {
		t.Errorf("floodgate version -json:\n got %+v\nwant %+v", i, want)
	}
	for _, line := range []string{"floodgate " + i.Version + " " + commit[:12] + " " + goVersion + "\n", "revision:  " + commit[:12] + "\n", "committed: " + committed + "\n", "go:        " + goVersion + " "} {
		if !strings.Contains(text, line) {
			t.Errorf("floodgate version does not print %q:\n%s", line, text)
		}
	}

	// The daemon's gauge, from /metrics.
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, []byte("policies: {api: {rate: 1/s}}\ncheck: {listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0}\nshutdown_delay: 0s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(bin, "serve", file)
	var stderr testkit.Buffer
	serve.Stderr = &stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		serve.Process.Signal(os.Interrupt)
		serve.Wait()
	}()
	var admin string
	testkit.Eventually(t, 30*time.Second, "the admin listener", func() bool {
		for _, m := range listening.FindAllStringSubmatch(stderr.String(), -1) {
			if m[1] == "admin" {
				admin = m[2]
			}
		}
		return admin != ""
	})
	_, body := httpGet(t, "http://"+admin+"/metrics")
	gauge := `floodgate_build_info{goversion="` + goVersion + `",revision="` + commit + `",version="` + i.Version + `"} 1`
	if !strings.Contains(body, gauge+"\n") {
		t.Errorf("/metrics has no %s:\n%s", gauge, grepLines(body, "floodgate_build_info"))
	}

	// Built again with a change in the tree: modified, in both forms.
	if err := os.WriteFile(filepath.Join(dir, "uncommitted.txt"), []byte("a change\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	buildVCS(t, dir, bin)
	i, text = versionOf(t, bin)
	if !i.Modified || i.Revision != commit || !strings.HasSuffix(i.Version, "+dirty") {
		t.Errorf("built from a changed tree: %+v; want modified, revision %s, a +dirty version", i, commit)
	}
	if !regexp.MustCompile(`(?m)^revision:  ` + commit[:12] + ` \(modified`).MatchString(text) {
		t.Errorf("floodgate version does not say the tree was modified:\n%s", text)
	}
}

// TestVersionUnstamped: without VCS stamping, the fields the build did not
// record say "unknown"; the command still exits 0, and rejects arguments.
func TestVersionUnstamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "floodgate")
	if b, err := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	i, text := versionOf(t, bin)
	if i.Revision != buildinfo.Unknown || i.Time != buildinfo.Unknown || i.Modified || i.GoVersion == "" {
		t.Errorf("an unstamped build: %+v", i)
	}
	if !strings.Contains(text, "revision:  unknown\n") {
		t.Errorf("floodgate version of an unstamped build:\n%s", text)
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"version", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("floodgate version extra: exit %d, want 2 (usage)", code)
	}
}

func mustOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out)
}
