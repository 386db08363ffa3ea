package bench

import (
	"bufio"
	"fmt"
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
// internal/testenv does the same but is not importable from here.)
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// startRedis starts a redis-server on 127.0.0.1 and waits until it answers
// PING. The server is killed by stop; tb.Cleanup is not used because a
// benchmark's server is shared by all its sub-benchmarks.
func startRedis(tb testing.TB) *redisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not on PATH (apt-get install redis-server): %v", err)
	}
	var lastErr error
	for range 5 {
		s, err := tryStartRedis(tb, bin)
		if err == nil {
			return s
		}
		lastErr = err // most likely lost a race for the port: try another
	}
	tb.Fatal(lastErr)
	return nil
}

func tryStartRedis(tb testing.TB, bin string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
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
		if err := redisPing(s.addr); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 10 s: %v", s.addr, err)
		}
		select {
		case <-s.done:
			logf.Close()
			out, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("redis-server on %s exited: %s", s.addr, strings.TrimSpace(string(out)))
		case <-time.After(20 * time.Millisecond):
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
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
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
