package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a redis-server process started for one test. It is killed
// when the test ends.
type RedisServer struct {
	// Addr is "127.0.0.1:port". It stays the same across Kill and Restart,
	// so clients configured with it reconnect to the restarted server.
	Addr string
	// Port is the port of Addr.
	Port int
	// Dir holds the server's working files and its log, redis.log.
	Dir string

	server
}

// Redis starts a standalone redis-server on a free loopback port and waits
// until it answers PING. It has no persistence (restarting it empties it) and
// allows DEBUG, so tests can stall it with DEBUG SLEEP.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	return startRedis(t, "redis-server", 1, func(ports []int, dir string) ([]string, error) {
		return redisArgs(ports[0], dir), nil
	})
}

// ErrNotInstalled is StartRedis's error when redis-server is not on PATH.
var ErrNotInstalled = errors.New("testkit: redis-server not found on PATH: install the Debian package redis-server (make test does it)")

// StartRedis starts a standalone redis-server as Redis does, for programs
// that have no *testing.T: the demo, the course's experiments, Examples.
// Close kills it and removes its files; Start starts it again after Kill.
func StartRedis() (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "floodgate-redis-")
		if err != nil {
			return nil, err
		}
		s := newRedisServer(nil, fmt.Sprintf("redis-server on %d", ports[0]), bin, redisArgs(ports[0], dir), ports[0], dir)
		err = s.start()
		if err == nil {
			return s, nil
		}
		os.RemoveAll(dir)
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return nil, err
		}
	}
}

// Start starts the server again on its port after Kill or Stop, for
// programs; tests call Restart.
func (s *RedisServer) Start() error { return s.startAgain() }

// Close kills a server StartRedis started and removes its files.
func (s *RedisServer) Close() {
	s.kill()
	os.RemoveAll(s.Dir)
}

// redisArgs is the command line shared by every server this package starts:
// loopback only, no persistence, logs on stdout (captured to redis.log), fast
// replica sync (no 5 s diskless-sync delay), DEBUG allowed.
func redisArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		"--enable-debug-command", "yes",
		"--repl-diskless-sync-delay", "0",
	}
}

// startRedis starts a redis-server whose arguments build makes from nports
// fresh ports (ports[0] is the client port) and a fresh directory, retrying
// with new ports when it loses a race for one.
func startRedis(t testing.TB, name string, nports int, build func(ports []int, dir string) ([]string, error)) *RedisServer {
	t.Helper()
	bin := RequireBinary(t, "redis-server", "redis-server")
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nports)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		args, err := build(ports, dir)
		if err != nil {
			t.Fatalf("testkit: prepare %s: %v", name, err)
		}
		s := newRedisServer(t, fmt.Sprintf("%s on %d", name, ports[0]), bin, args, ports[0], dir)
		err = s.start()
		if err == nil {
			t.Cleanup(s.kill)
			return s
		}
		if errors.Is(err, errPortInUse) && attempt < startAttempts {
			t.Logf("testkit: %s lost a race for its port, retrying with new ports", s.name)
			continue
		}
		if strings.Contains(err.Error(), "Bad directive") {
			t.Fatalf("%v\n(testkit needs Redis 7.0 or newer: check redis-server --version)", err)
		}
		t.Fatal(err)
	}
}

func newRedisServer(t testing.TB, name, bin string, args []string, port int, dir string) *RedisServer {
	s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir}
	s.t, s.name = t, name
	s.spawn = func() (*process, error) {
		return startProcess(s.name, bin, args, s.Dir, filepath.Join(s.Dir, "redis.log"), nil)
	}
	s.ready = func(p *process) error { return redisReady(s.Addr, p.cmd.Process.Pid) }
	s.crash = shutdown{sig: syscall.SIGKILL}
	s.halt = shutdown{sig: syscall.SIGTERM, grace: 10 * time.Second}
	return s
}

// redisReady succeeds once the server at addr answers PING and is the
// process with the given pid, not another server that grabbed the port
// while ours was failing to bind it. A server loading its data replies
// -LOADING, which counts as not ready.
func redisReady(addr string, pid int) error {
	r, err := redisSession(addr, 500*time.Millisecond, []string{"PING"}, []string{"INFO", "server"})
	if err != nil {
		return err
	}
	if r[0] != "PONG" {
		return fmt.Errorf("PING replied %v", r[0])
	}
	info, _ := r[1].(string)
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by process %s, not ours (%d)", addr, got, pid)
	}
	return nil
}

// Pid returns the process ID of the running server (0 when none runs),
// e.g. to read its CPU time in /proc.
func (s *RedisServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.cmd.Process == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the process to exit: a crash, with no
// chance to reply to clients or close connections cleanly.
func (s *RedisServer) Kill() { s.kill() }

// Stop shuts the server down gracefully (SIGTERM), falling back to SIGKILL
// after 10 s. Clients see their connections closed.
func (s *RedisServer) Stop() { s.stop() }

// Running reports whether the server process is alive.
func (s *RedisServer) Running() bool { return s.running() }

// Restart starts the server again on the same port and directory, killing
// it first if it is still running, and waits until it answers PING. Data is
// lost (there is no persistence); a cluster node keeps its nodes.conf and so
// rejoins its cluster. Call it from the test goroutine.
func (s *RedisServer) Restart() { s.restart() }

// Do sends one command to the server; see RedisDo for the reply types.
func (s *RedisServer) Do(args ...string) (any, error) {
	return RedisDo(s.Addr, args...)
}

// Pause makes the server hold every client command (reads and writes) for d
// with CLIENT PAUSE ... ALL, as during a failover or a slow fork. The server
// stays connected, so clients see latency, not errors. It returns at once.
func (s *RedisServer) Pause(d time.Duration) {
	s.t.Helper()
	ms := strconv.FormatInt(d.Milliseconds(), 10)
	if _, err := s.Do("CLIENT", "PAUSE", ms, "ALL"); err != nil {
		s.t.Fatalf("testkit: CLIENT PAUSE %s ALL on %s: %v", ms, s.name, err)
	}
}

// PauseWrites makes the server hold every command that may write, EVAL and
// EVALSHA included, with CLIENT PAUSE ... WRITE, until Unpause (or, as a
// backstop against a test that never calls it, for a minute). Reads, PING
// and CLIENT UNPAUSE itself still answer, so a test holds Redis exactly as
// long as its assertions need, instead of guessing how long they take on a
// loaded machine. The server is unpaused when the test ends.
func (s *RedisServer) PauseWrites() {
	s.t.Helper()
	if _, err := s.Do("CLIENT", "PAUSE", "60000", "WRITE"); err != nil {
		s.t.Fatalf("testkit: CLIENT PAUSE 60000 WRITE on %s: %v", s.name, err)
	}
	s.t.Cleanup(func() {
		if s.Running() {
			_, _ = s.Do("CLIENT", "UNPAUSE")
		}
	})
}

// Unpause ends a PauseWrites (or a Pause) at once: the held commands run.
func (s *RedisServer) Unpause() {
	s.t.Helper()
	if _, err := s.Do("CLIENT", "UNPAUSE"); err != nil {
		s.t.Fatalf("testkit: CLIENT UNPAUSE on %s: %v", s.name, err)
	}
}

// DebugSleep blocks the whole server for d with DEBUG SLEEP, as a long Lua
// script or a stuck disk would: it answers nothing, not even PING, though the
// kernel still accepts connections. It returns once the command is sent; the
// channel receives the command's result (nil, or why it failed) when the
// sleep ends, and is then closed. Call it from the test goroutine.
func (s *RedisServer) DebugSleep(d time.Duration) <-chan error {
	s.t.Helper()
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	conn, err := net.DialTimeout("tcp", s.Addr, redisTimeout)
	if err != nil {
		s.t.Fatalf("testkit: DEBUG SLEEP on %s: %v", s.name, err)
	}
	_ = conn.SetDeadline(time.Now().Add(d + redisTimeout))
	if err := writeCommand(conn, []string{"DEBUG", "SLEEP", secs}); err != nil {
		conn.Close()
		s.t.Fatalf("testkit: DEBUG SLEEP on %s: %v", s.name, err)
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer conn.Close()
		_, err := readReply(bufio.NewReader(conn))
		done <- err
	}()
	return done
}

// writeFile writes a config file for a server.
func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}
