package main

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/testkit"
)

// healthCmd runs the built binary's `floodgate health` with args, as a
// container runtime's healthcheck does, and returns its exit code and
// output.
func healthCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, append([]string{"health"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// TestHealthCommand: floodgate health answers 0 while the daemon is up and
// ready, 1 with the reason when it is not ready, not listening or not
// answering.
func TestHealthCommand(t *testing.T) {
	r := testkit.Redis(t)
	d := startDaemon(t, redisConf(r.Addr, "fail_closed", upstream(t)), "proxy", "admin")
	admin := "http://" + d.addr("admin")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-addr", admin}, admin + "/healthz: ok"},
		{[]string{"-addr", admin + "/", "-ready"}, admin + "/readyz: ready"},
	} {
		if code, out, errOut := healthCmd(t, tc.args...); code != 0 || strings.TrimSpace(out) != tc.want {
			t.Errorf("health %q: exit %d %q %q, want 0 %q", tc.args, code, out, errOut, tc.want)
		}
	}

	// Not ready: Redis is gone and the engine fails closed. Alive still.
	r.Kill()
	code, out, errOut := healthCmd(t, "-addr", admin, "-ready")
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "floodgate health: "+admin+"/readyz: 503 Service Unavailable: not ready") ||
		strings.Count(errOut, "\n") != 1 {
		t.Errorf("health -ready with Redis down: exit %d %q %q, want 1 and one line: 503 not ready", code, out, errOut)
	}
	if code, out, errOut := healthCmd(t, "-addr", admin); code != 0 {
		t.Errorf("health with Redis down: exit %d %q %q, want 0: the daemon is alive", code, out, errOut)
	}

	// Nothing listening on the port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	code, out, errOut = healthCmd(t, "-addr", closed)
	if code != 1 || out != "" || !strings.Contains(errOut, "connection refused") ||
		!strings.Contains(errOut, "is the daemon's admin listener on "+closed+"?") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("health on a closed port: exit %d %q %q, want 1 and one line: connection refused", code, out, errOut)
	}

	// A listener that takes the connection and never answers: the
	// kernel completes the handshake, nobody accepts.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	code, out, errOut = healthCmd(t, "-addr", "http://"+silent.Addr().String(), "-timeout", "200ms")
	if want := "floodgate health: http://" + silent.Addr().String() + "/healthz: no answer within 200ms\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("health on a silent port: exit %d %q %q, want 1 %q", code, out, errOut, want)
	}

	// Usage errors are 1 too: a healthcheck reads anything else than 0
	// and 1 as reserved.
	for _, args := range [][]string{{"-bogus"}, {"extra"}, {"-timeout", "0s"}, {"-addr", "::bad"}} {
		if code, out, errOut := healthCmd(t, args...); code != 1 || out != "" || errOut == "" {
			t.Errorf("health %q: exit %d %q %q, want 1 and a reason", args, code, out, errOut)
		}
	}
}
