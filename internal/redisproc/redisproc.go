// Package redisproc starts a throwaway redis-server on a loopback port for
// programs that are not tests: the demo, the course experiments and the
// Examples that need a real Redis. Tests use testkit, which ties
// servers to a testing.TB.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotInstalled reports that redis-server is not on PATH.
var ErrNotInstalled = errors.New("redis-server not found on PATH: install the Debian package redis-server (make test does it)")

// A Server is a redis-server process without persistence on a loopback
// port that stays the same across Kill and Start.
type Server struct {
	// Addr is "127.0.0.1:port".
	Addr string

	bin    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	out    *strings.Builder
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING.
func Start(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	// A port found free may be taken before the server binds it: try a few.
	for range 5 {
		var l net.Listener
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		s := &Server{bin: bin, port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
		if err = s.Start(ctx); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Start runs the server again on its port, after Kill, and waits until it
// answers PING. Its data starts empty.
func (s *Server) Start(ctx context.Context) error {
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	// Read only once the process has exited, when exec is done writing.
	s.out = new(strings.Builder)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited at start: %s", s.Addr, strings.TrimSpace(s.out.String()))
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		info, err := c.Info(pctx, "server").Result()
		cancel()
		// The server that answers must be ours, not one that took the port.
		if err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
			return nil
		}
		if err == nil {
			err = errors.New("another process answers on the port")
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process
	}
}

// Kill sends SIGKILL, a crash with no goodbye to clients, and waits for the
// process to exit.
func (s *Server) Kill() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	<-s.exited
	return nil
}
