package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// redisServer is a redis-server process that this package started on a
// free loopback port, with no persistence. (The main module's
// testkit does the same but is not importable from here.)
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// startRedis starts a redis-server on 127.0.0.1 and waits until it answers
// PING as the process it started. The server is killed by stop; tb.Cleanup
// is not used because a benchmark's server is shared by all its
// sub-benchmarks.
func startRedis(tb testing.TB) *redisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not on PATH (apt-get install redis-server): %v", err)
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		s, err := tryStartRedis(tb, bin, port)
		if err == nil {
			return s
		}
		// Only a lost race for the port is worth another try.
		if !errors.Is(err, errPortInUse) || attempt == attempts {
			tb.Fatal(err)
		}
		tb.Logf("%v; retrying on another port", err)
	}
}

// errPortInUse marks a redis-server that exited because another process
// took its port between freePort and its bind.
var errPortInUse = errors.New("port already in use")

// tryStartRedis starts a redis-server on port, which should be free.
func tryStartRedis(tb testing.TB, bin string, port int) (*redisServer, error) {
	dir := tb.TempDir()
	logf, err := os.Create(dir + "/redis.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{}), log: logf}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Whatever answers must be our process: another server that holds
		// the port (someone else's, which tests would FLUSHALL) is not.
		err := redisReady(s.addr, cmd.Process.Pid)
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			logf.Close()
			out, _ := os.ReadFile(logf.Name())
			log := strings.TrimSpace(string(out))
			if strings.Contains(log, "Address already in use") {
				return nil, fmt.Errorf("redis-server on %s: %w: %s", s.addr, errPortInUse, log)
			}
			return nil, fmt.Errorf("redis-server on %s exited: %s", s.addr, log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s not ready within 10 s: %v", s.addr, err)
		}
	}
}

func (s *redisServer) stop() {
	s.cmd.Process.Kill()
	<-s.done
	s.log.Close()
}

var portsMu sync.Mutex

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisPing sends PING in RESP and expects +PONG.
func redisPing(addr string) error {
	_, err := redisInfo(addr, false)
	return err
}

// redisReady succeeds once the server at addr answers PING and INFO server
// names pid as its process_id.
func redisReady(addr string, pid int) error {
	info, err := redisInfo(addr, true)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("%s is served by process %s, not ours (%d)", addr, v, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: INFO server has no process_id", addr)
}

// redisInfo sends PING in RESP and expects +PONG, then, if info is set,
// sends INFO server and returns its text.
func redisInfo(addr string, info bool) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if line != "+PONG\r\n" {
		return "", fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	if !info {
		return "", nil
	}
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return "", err
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return "", fmt.Errorf("INFO server answered %q", strings.TrimSpace(line))
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body[:n]), nil
}

func TestRedisStarter(t *testing.T) {
	s := startRedis(t)
	if err := redisPing(s.addr); err != nil {
		t.Fatal(err)
	}
	s.stop()
	if err := redisPing(s.addr); err == nil {
		t.Fatal("server still answers after stop")
	}
}

// TestRedisStarterPortTaken: a server started on a port another server
// holds is reported as a lost race (so startRedis retries), never taken for
// ready because the other server answers PING.
func TestRedisStarterPortTaken(t *testing.T) {
	other := startRedis(t)
	defer other.stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(other.addr[strings.LastIndexByte(other.addr, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	s, err := tryStartRedis(t, bin, port)
	if err == nil {
		s.stop()
		t.Fatalf("started on %s, which another server holds", other.addr)
	}
	if !errors.Is(err, errPortInUse) {
		t.Errorf("error %v, want one wrapping errPortInUse", err)
	}
	if err := redisReady(other.addr, other.cmd.Process.Pid); err != nil {
		t.Errorf("the other server: %v", err)
	}
	if err := redisReady(other.addr, other.cmd.Process.Pid+1); err == nil {
		t.Error("redisReady accepted another process's server")
	}
}
