package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testkit"
)

// TestSIGTERMExitsWithinShutdownTimeout: with a request that never ends in
// flight, SIGTERM drains for shutdown_timeout, cuts the request off and
// exits 0, in about shutdown_timeout (it used to add five seconds and exit
// 1).
func TestSIGTERMExitsWithinShutdownTimeout(t *testing.T) {
	arrived := make(chan struct{}, 1)
	hang := make(chan struct{})
	defer close(hang)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`
policies: {api: {rate: 100/s}}
proxy: {listen: 127.0.0.1:0, upstream: %s, routes: [{limits: [{policy: api}]}]}
admin: {listen: ""}
shutdown_timeout: 1s
`, up)), 0o644)
	// The daemon's output is copied to a buffer that Wait completes, so
	// the lines it writes on its way out are all there.
	cmd := exec.Command(binary, "serve", file)
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var addr string
	testkit.Eventually(t, 20*time.Second, "the proxy listening", func() bool {
		m := listening.FindStringSubmatch(stderr.String())
		if m != nil && m[1] == "proxy" {
			addr = m[2]
		}
		return addr != ""
	})
	go http.Get("http://" + addr + "/")
	<-arrived
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("exit: %v, want 0\n%s", err, stderr.String())
	}
	// The bug added 5 s to the timeout; a hang detector well below it.
	if took > 4*time.Second {
		t.Errorf("exited %v after SIGTERM with shutdown_timeout 1s", took)
	}
	if !strings.Contains(stderr.String(), "cut off") {
		t.Errorf("the cut-off request is not logged:\n%s", stderr.String())
	}
}

// TestReadinessFailsBeforeListenersClose: with shutdown_delay, /readyz
// fails while the proxy still serves, so a load balancer stops sending
// first.
func TestReadinessFailsBeforeListenersClose(t *testing.T) {
	if testing.Short() {
		t.Skip("a long test; make test runs it")
	}
	d := startDaemon(t, `
policies: {api: {rate: 100/s}}
proxy: {listen: 127.0.0.1:0, upstream: demo, routes: [{limits: [{policy: api}]}]}
admin: {listen: 127.0.0.1:0}
shutdown_delay: 3s
`, "proxy", "admin")
	d.cmd.Process.Signal(syscall.SIGTERM)
	testkit.Eventually(t, 20*time.Second, "/readyz failing", func() bool {
		resp, err := http.Get("http://" + d.addr("admin") + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	resp, err := http.Get("http://" + d.addr("proxy") + "/")
	if err != nil {
		t.Fatalf("the proxy stopped serving before the shutdown delay passed: %v\n%s", err, d.logs())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the proxy during the shutdown delay: %d", resp.StatusCode)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestSIGHUPDuringStart: a SIGHUP that arrives while the daemon reads its
// configuration (seen as the moment the file is opened) neither kills it
// nor is lost: the daemon starts and serves.
func TestSIGHUPDuringStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, []byte("policies: {api: {rate: 1/s}}\ncheck: {listen: 127.0.0.1:0}\nadmin: {listen: \"\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		opened := watchOpen(t, file)
		cmd := exec.Command(binary, "serve", file)
		var stderr testkit.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-opened:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("the daemon never opened its configuration:\n%s", stderr.String())
		}
		cmd.Process.Signal(syscall.SIGHUP)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var err error
		gone := false
		testkit.Eventually(t, 20*time.Second, "the daemon listening or gone after a SIGHUP at start", func() bool {
			select {
			case err = <-exited:
				gone = true
				return true
			default:
				return strings.Contains(stderr.String(), "msg=listening")
			}
		})
		if gone {
			t.Fatalf("try %d: a SIGHUP at start ended the daemon (%v):\n%s", i, err, stderr.String())
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Fatalf("try %d: exit after SIGTERM: %v", i, err)
		}
	}
}

// watchOpen reports on the channel when path is next opened, through
// inotify (IN_OPEN), which sees the open itself rather than guess its
// time.
func watchOpen(t *testing.T, path string) <-chan struct{} {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.InotifyAddWatch(fd, path, syscall.IN_OPEN); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		defer syscall.Close(fd)
		buf := make([]byte, 4096)
		for {
			n, err := syscall.Read(fd, buf)
			if err == syscall.EINTR {
				continue // the runtime's preemption signal
			}
			if err == nil && n >= syscall.SizeofInotifyEvent {
				close(ch)
			}
			return
		}
	}()
	return ch
}

// newUpstream serves h on a free loopback port until t ends.
func newUpstream(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestSIGHUPWhilePackagesInitialise: a SIGHUP sent the moment the process
// ignores it, while the packages it links still initialise (milliseconds
// before main runs), neither kills the daemon nor stops its reloads. The
// moment is read from the kernel (SigIgn in /proc/PID/status), so a signal
// sent lands in that window; a try whose poll comes too late (serve has
// taken the signal over and is listening: on a busy machine the window of
// a few milliseconds can pass between two reads) sends nothing and starts
// again. Before the runtime has started no program can hold the signal;
// that window is the process's first few milliseconds.
func TestSIGHUPWhilePackagesInitialise(t *testing.T) {
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, []byte("policies: {api: {rate: 1/s}}\ncheck: {listen: 127.0.0.1:0}\nadmin: {listen: \"\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const want, tries = 3, 30
	landed := 0
	for i := 0; i < tries && landed < want; i++ {
		cmd := exec.Command(binary, "serve", file)
		var stderr testkit.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		deadline := time.Now().Add(20 * time.Second)
		inWindow := false
		for !inWindow && !strings.Contains(stderr.String(), "msg=listening") && time.Now().Before(deadline) {
			inWindow = ignoresSIGHUP(status)
		}
		if !inWindow {
			cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			continue
		}
		landed++
		cmd.Process.Signal(syscall.SIGHUP)
		var err error
		gone := false
		testkit.Eventually(t, 20*time.Second, "the daemon listening or gone after a SIGHUP during init", func() bool {
			select {
			case err = <-exited:
				gone = true
				return true
			default:
				return strings.Contains(stderr.String(), "msg=listening")
			}
		})
		if gone {
			t.Fatalf("try %d: a SIGHUP during init ended the daemon (%v):\n%s", i, err, stderr.String())
		}
		// serve has taken SIGHUP over: it reloads now.
		cmd.Process.Signal(syscall.SIGHUP)
		testkit.Eventually(t, 20*time.Second, "the reload of a SIGHUP after start", func() bool {
			return strings.Contains(stderr.String(), "SIGHUP: reading the configuration again")
		})
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Fatalf("try %d: exit after SIGTERM: %v", i, err)
		}
	}
	if landed == 0 {
		t.Fatalf("in %d starts the process was never seen ignoring SIGHUP before it listened", tries)
	}
}

// ignoresSIGHUP reports whether the process whose status file is path
// ignores SIGHUP (signal 1, the lowest bit of SigIgn).
func ignoresSIGHUP(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&1 != 0
		}
	}
	return false
}
