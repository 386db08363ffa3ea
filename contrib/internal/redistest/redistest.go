// Package redistest starts a redis-server for the tests of floodgate's
// framework adapters, which live in modules of their own and cannot use the
// main module's internal test environment.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start runs a redis-server without persistence on a free loopback port and
// returns a client for it. The server is killed when the test ends. A
// missing redis-server fails the test: install the Debian package
// redis-server (make test does).
func Start(t testing.TB) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found (%v); install the Debian package redis-server", err)
	}
	for attempt := 1; ; attempt++ {
		c, err := start(t, bin)
		if err == nil {
			return c
		}
		if attempt == 5 {
			t.Fatalf("redistest: %v", err)
		}
	}
}

func start(t testing.TB, bin string) (*redis.Client, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	logf, err := os.Create(dir + "/redis.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	// Wait until it answers PING, and make sure the server answering is
	// the one started here, not another process that took the port.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			c.Close()
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, tail(dir+"/redis.log"))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		pid, err := serverPID(ctx, c)
		cancel()
		if err == nil {
			if pid != cmd.Process.Pid {
				c.Close()
				stop()
				return nil, fmt.Errorf("port %d answered by process %d, not redis-server %d", port, pid, cmd.Process.Pid)
			}
			t.Cleanup(func() { c.Close(); stop() })
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Close()
			stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverPID asks the server for PING and its process_id.
func serverPID(ctx context.Context, c *redis.Client) (int, error) {
	if err := c.Ping(ctx).Err(); err != nil {
		return 0, err
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server has no process_id")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
