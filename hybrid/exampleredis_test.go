package hybrid_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/testenv"
)

// exampleRedis is the redis-server the package's Examples talk to. An
// Example has no *testing.T to start one through testenv, so redisAddr
// starts it on first use and TestMain kills it.
var exampleRedis struct {
	once sync.Once
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited
	err  error
}

// redisAddr returns the address of a redis-server started for the
// Examples on a free loopback port. A missing redis-server fails the
// Example that needs it, as it fails every Redis test.
func redisAddr() string {
	exampleRedis.once.Do(func() { exampleRedis.err = startExampleRedis() })
	if exampleRedis.err != nil {
		panic(exampleRedis.err)
	}
	return exampleRedis.addr
}

func startExampleRedis() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found on PATH: install the Debian package redis-server (make test does it): %w", err)
	}
	dir, err := os.MkdirTemp("", "floodgate-hybrid-example-")
	if err != nil {
		return err
	}
	exampleRedis.dir = dir
	// A port found free may be taken before the server binds it: try a few.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		logFile, err := os.Create(filepath.Join(dir, "redis.log"))
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			logFile.Close()
			return fmt.Errorf("start redis-server: %w", err)
		}
		logFile.Close()
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if v, err := testenv.RedisDo(addr, "PING"); err == nil && v == "PONG" {
				exampleRedis.addr, exampleRedis.cmd, exampleRedis.done = addr, cmd, exited
				return nil
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				cmd.Process.Kill()
				<-exited
				return fmt.Errorf("redis-server on %s did not answer PING within 20 s", addr)
			}
			break
		}
		if attempt == 5 {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited at start:\n%s", addr, log)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleRedis.cmd != nil {
		exampleRedis.cmd.Process.Kill()
		<-exampleRedis.done
	}
	if exampleRedis.dir != "" {
		os.RemoveAll(exampleRedis.dir)
	}
	os.Exit(code)
}
