//go:build linux

package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a unixgram socket at name (a path, or @abstract) for the
// test, as systemd does for a unit.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifyPathAndAbstract(t *testing.T) {
	dir, err := os.MkdirTemp("", "sdn") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, name := range []string{
		filepath.Join(dir, "notify"),
		fmt.Sprintf("@floodgate-sdnotify-test-%d", os.Getpid()),
	} {
		c := listen(t, name)
		t.Setenv(Socket, name)
		for _, state := range []string{Ready, Reloading(), Stopping} {
			sent, err := Notify(state)
			if !sent || err != nil {
				t.Fatalf("%s: Notify(%q) = %v, %v", name, state, sent, err)
			}
			if got := receive(t, c); got != state {
				t.Errorf("%s: received %q, sent %q", name, got, state)
			}
		}
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv(Socket, "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("without $NOTIFY_SOCKET: %v, %v; want nothing sent, no error", sent, err)
	}
}

func TestNotifyErrors(t *testing.T) {
	for _, name := range []string{"relative/socket", "vsock:2:1234", filepath.Join(t.TempDir(), "nobody-listens")} {
		t.Setenv(Socket, name)
		if sent, err := Notify(Ready); sent || err == nil {
			t.Errorf("$NOTIFY_SOCKET=%q: %v, %v; want an error", name, sent, err)
		}
	}
}

// TestReloadingTime: MONOTONIC_USEC is CLOCK_MONOTONIC in microseconds.
// The kernel's uptime (/proc/uptime, CLOCK_BOOTTIME) counts from the same
// boot and also counts suspended time, so it is never behind: a value in
// nanoseconds, or from the wall clock, would be far above it.
func TestReloadingTime(t *testing.T) {
	lines := strings.Split(Reloading(), "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" {
		t.Fatalf("Reloading() = %q", lines)
	}
	v, ok := strings.CutPrefix(lines[1], "MONOTONIC_USEC=")
	if !ok {
		t.Fatalf("no MONOTONIC_USEC: %q", lines[1])
	}
	us, err := strconv.ParseUint(v, 10, 64)
	if err != nil || us == 0 {
		t.Fatalf("MONOTONIC_USEC=%q: %v", v, err)
	}
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	uptime, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	if float64(us) > (uptime+1)*1e6 {
		t.Errorf("MONOTONIC_USEC=%d is past the uptime, %.2f s: not CLOCK_MONOTONIC in microseconds", us, uptime)
	}
}
