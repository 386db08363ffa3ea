package testkit

import (
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// shutdown is how a server is ended: sig, then SIGKILL to its process group
// if it has not exited within grace.
type shutdown struct {
	sig   syscall.Signal
	grace time.Duration
}

// server is the life cycle RedisServer and PostgresServer share: one process
// at a time, always on the same address, which a test may crash, stop and
// start again.
type server struct {
	t    testing.TB
	name string
	// spawn starts the process; ready succeeds once it serves clients.
	spawn func() (*process, error)
	ready func(*process) error
	// crash ends the server for Kill, Restart and the test's cleanup; halt
	// ends it for Stop.
	crash, halt shutdown

	mu   sync.Mutex
	proc *process
}

// start runs the process and waits until it is ready. The caller holds mu
// or owns s exclusively.
func (s *server) start() error {
	p, err := s.spawn()
	if err != nil {
		return err
	}
	s.proc = p
	return p.waitReady(func() error { return s.ready(p) })
}

func (s *server) end(how shutdown) {
	if s.proc != nil {
		s.proc.stop(how.sig, how.grace)
	}
}

// kill crashes the server and waits for it to exit.
func (s *server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(s.crash)
}

func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(s.halt)
}

func (s *server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// restart crashes the server if it still runs and starts it again on the
// same port, failing the test when it cannot.
func (s *server) restart() {
	s.t.Helper()
	if err := s.startAgain(); err != nil {
		s.t.Fatalf("testkit: restart %s on the same port: %v", s.name, err)
	}
}

// startAgain crashes the server if it still runs and starts it again on the
// same port.
func (s *server) startAgain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(s.crash)
	// The port may be held for a moment by a connection that used it as its
	// local port; keep trying briefly rather than fail on a transient race.
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := s.start()
		if err == nil || !errors.Is(err, errPortInUse) || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
