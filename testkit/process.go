package testkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer after it is
// started. Servers are local and empty and normally answer within a second;
// the margin is for CI machines loaded by many test binaries at once, and
// anything slower means the server is broken.
const startTimeout = 20 * time.Second

// startAttempts is how many fresh ports a start tries before giving up. A
// port found free may be taken by someone else before the server binds it.
const startAttempts = 5

// envAllowSkip lets a developer skip tests whose servers are not installed.
const envAllowSkip = "FLOODGATE_ALLOW_SKIP"

// allowSkip reports whether a missing server may skip the test instead of
// failing it: only on explicit opt-in, and never in CI, where a skipped
// integration test would hide that nothing was tested.
func allowSkip() bool {
	return os.Getenv(envAllowSkip) == "1" && os.Getenv("CI") == ""
}

// missing reports a binary that is not installed: a failure, or a skip if the
// developer opted in.
func missing(t testing.TB, what, debPackage string) {
	t.Helper()
	msg := fmt.Sprintf("testkit: %s not found: install the Debian package %s (make test does it)", what, debPackage)
	if allowSkip() {
		t.Skipf("%s; skipping because %s=1", msg, envAllowSkip)
	}
	t.Fatalf("%s; to skip such tests locally (never in CI) set %s=1", msg, envAllowSkip)
}

// RequireBinary returns the path of the program name on PATH. A program that
// is not installed fails the test, naming the Debian package to install
// (make test installs them); only a developer who set FLOODGATE_ALLOW_SKIP=1
// outside CI (the CI variable unset) gets a skip instead. It is the one rule
// for every server and tool floodgate's tests run.
func RequireBinary(t testing.TB, name, debPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, name+" on PATH", debPackage)
	}
	return p
}

var (
	portsMu sync.Mutex
	// portsGiven remembers every port handed out by this process. The kernel
	// may return a port again as soon as our probe listener closes, and
	// parallel tests must not be given the same one.
	portsGiven = map[int]bool{}
)

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. All probe listeners stay open until all ports are chosen, so the
// kernel cannot hand the same port out twice within one call.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, errors.New("testkit: could not find free loopback ports; is the ephemeral port range exhausted?")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testkit: listen on 127.0.0.1:0 to find a free port: %w", err)
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		if portsGiven[p] {
			continue
		}
		portsGiven[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// process is one server process started by this package.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFrom int64 // size of the log when this process started
	done    chan struct{}
	err     error // exit status, valid once done is closed
}

// startProcess starts bin with args, stdout and stderr appended to logPath.
// The process gets its own process group (so a kill reaches any children it
// forks) and SIGKILL as parent-death signal (so it never outlives the test
// binary). cred, if not nil, sets the uid/gid it runs as.
func startProcess(name, bin string, args []string, dir, logPath string, cred *syscall.Credential) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testkit: open %s log: %w", name, err)
	}
	defer logf.Close()
	st, err := logf.Stat()
	if err != nil {
		return nil, fmt.Errorf("testkit: stat %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testkit: start %s (%s): %w", name, bin, err)
	}
	p := &process{
		name:    name,
		cmd:     cmd,
		logPath: logPath,
		logFrom: st.Size(),
		done:    make(chan struct{}),
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the whole process group and waits for the process.
// The group leader is not reaped before the signal is sent, so the group id
// cannot have been reused.
func (p *process) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// stop sends sig to the process and waits up to grace for it to exit, then
// kills the process group. SIGKILL, which no process can handle, goes to the
// whole group at once.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	if sig == syscall.SIGKILL {
		p.kill()
		return
	}
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	p.kill()
}

// newLog returns what the process wrote to its log since it started.
func (p *process) newLog() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(p.logFrom, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// logTail returns the last lines the process logged, for error messages.
func (p *process) logTail() string {
	return tail(p.newLog(), 20)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errPortInUse marks a start that failed because the port was taken; the
// caller may retry with a new port.
var errPortInUse = errors.New("address already in use")

// waitReady polls probe until it succeeds, the process exits, or
// startTimeout passes. The error says which, with the end of the log.
func (p *process) waitReady(probe func() error) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for {
		if p.exited() {
			log := p.newLog()
			err := fmt.Errorf("testkit: %s exited before it was ready (%v); log (%s):\n%s", p.name, p.err, p.logPath, tail(log, 20))
			if strings.Contains(strings.ToLower(log), "address already in use") {
				return fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return err
		}
		if last = probe(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("testkit: %s not ready after %v (last probe: %v); it was killed; log (%s):\n%s",
				p.name, startTimeout, last, p.logPath, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
