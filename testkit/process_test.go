package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestFreePortsDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		ports, err := freePorts(5)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}

func TestAllowSkip(t *testing.T) {
	for _, tc := range []struct {
		allow, ci string
		want      bool
	}{
		{"", "", false},
		{"1", "", true},
		{"1", "true", false},
		{"1", "1", false},
		{"yes", "", false},
	} {
		t.Setenv(envAllowSkip, tc.allow)
		t.Setenv("CI", tc.ci)
		if got := allowSkip(); got != tc.want {
			t.Errorf("FLOODGATE_ALLOW_SKIP=%q CI=%q: allowSkip = %v, want %v", tc.allow, tc.ci, got, tc.want)
		}
	}
}

// recorder is a testing.TB that records Fatalf and Skipf instead of ending
// the test, to check what a missing binary does.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())

	t.Setenv("CI", "true")
	t.Setenv(envAllowSkip, "1")
	r := &recorder{TB: t}
	RequireBinary(r, "redis-server", "redis-server")
	if !strings.Contains(r.fatal, "install the Debian package redis-server (make test does it)") || r.skip != "" {
		t.Fatalf("in CI: fatal %q, skip %q; want a failure naming the package", r.fatal, r.skip)
	}

	t.Setenv("CI", "")
	r = &recorder{TB: t}
	RequireBinary(r, "redis-server", "redis-server")
	if r.skip == "" {
		t.Fatalf("with %s=1 outside CI: fatal %q; want a skip", envAllowSkip, r.fatal)
	}
}

func TestSweepPostgresDirs(t *testing.T) {
	// A pid that existed and is gone: a child that has exited and been
	// reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(os.TempDir(), pgDirPrefix+strconv.Itoa(cmd.Process.Pid)+"-sweeptest")
	alive := filepath.Join(os.TempDir(), pgDirPrefix+strconv.Itoa(os.Getpid())+"-sweeptest")
	for _, d := range []string{dead, alive} {
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(dead); os.RemoveAll(alive) })

	sweepPostgresDirs()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("directory of dead pid %d survived the sweep (err %v)", cmd.Process.Pid, err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("directory of this live process was swept: %v", err)
	}
}
