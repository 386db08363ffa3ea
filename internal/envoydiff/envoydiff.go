// Package envoydiff runs floodgate's Envoy rate limit service and
// envoyproxy/ratelimit side by side: the reference built from its source at
// a pinned version (Version), each server on its own redis-server, both
// configured with the same rule files, so a test or a benchmark can send
// them the same calls. The differential test of this package compares their
// answers call by call; the Envoy benchmark loads both.
package envoydiff

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Module is envoyproxy/ratelimit's Go module.
const Module = "github.com/envoyproxy/ratelimit"

// Version is the reference's version: the newest the module proxy resolves
// (the project tags no releases; this is its main branch of 2026-01-22).
const Version = "v1.4.1-0.20260122083618-3fb702589d36"

// BuildTimeout bounds building the reference, downloads included.
const BuildTimeout = 10 * time.Minute

// Reference is the reference built from source.
type Reference struct {
	// Service is the rate limit service (src/service_cmd).
	Service string
	// Check is its configuration checker (src/config_check_cmd).
	Check string
	// Source is the module's source directory (read-only, in the module
	// cache): its test and example configurations are read from there.
	Source string
}

// goTool is the go command: GOROOT's when set, else the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// BuildReference builds envoyproxy/ratelimit at Version into a cache
// directory (FLOODGATE_ENVOY_REFERENCE_DIR, else the user's cache
// directory), once: a later call finds the binaries there. It takes at most
// BuildTimeout.
func BuildReference(ctx context.Context) (*Reference, error) {
	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	base := os.Getenv("FLOODGATE_ENVOY_REFERENCE_DIR")
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = os.TempDir()
		}
		base = filepath.Join(c, "floodgate", "envoy-ratelimit")
	}
	dir := filepath.Join(base, Version)
	ref := &Reference{Service: filepath.Join(dir, "service_cmd"), Check: filepath.Join(dir, "config_check_cmd")}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if !fileExists(ref.Service) || !fileExists(ref.Check) {
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, err
		}
		// Built into a directory of its own, then renamed into place, so
		// two builds at once never leave a half-written binary.
		tmp, err := os.MkdirTemp(base, "build-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.CommandContext(ctx, goTool(), "install",
			Module+"/src/service_cmd@"+Version, Module+"/src/config_check_cmd@"+Version)
		cmd.Env = append(env, "GOBIN="+tmp)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("envoydiff: building %s@%s: %w\n%s", Module, Version, err, out)
		}
		if err := os.Rename(tmp, dir); err != nil && !fileExists(ref.Service) {
			return nil, fmt.Errorf("envoydiff: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, goTool(), "mod", "download", "-json", Module+"@"+Version)
	cmd.Env = env
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("envoydiff: locating the source of %s@%s: %w", Module, Version, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return nil, fmt.Errorf("envoydiff: go mod download said %q", out)
	}
	ref.Source = m.Dir
	return ref, nil
}

// BuildFloodgate builds the floodgate command into dir, from the
// floodgate module the calling build uses (this tree, or what a go.mod
// replaces it with), in that module's own directory so that its own
// go.mod and go.sum resolve the command's dependencies.
func BuildFloodgate(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "floodgate")
	out, err := exec.CommandContext(ctx, goTool(), "list", "-m", "-f", "{{.Dir}}", "github.com/floodgate-go/floodgate").Output()
	root := strings.TrimSpace(string(out))
	if err != nil || root == "" {
		return "", fmt.Errorf("envoydiff: locating the floodgate module: %v %s", err, out)
	}
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, "./cmd/floodgate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("envoydiff: go build ./cmd/floodgate: %w\n%s", err, out)
	}
	return bin, nil
}

// A File is one rule file: its name and content.
type File struct {
	Name string
	Data []byte
}

// A Server is one running rate limit service process.
type Server struct {
	// Addr is its gRPC address.
	Addr string

	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Log returns what the server wrote so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Close stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (s *Server) Close() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// start runs cmd in a process group of its own, copying its output into
// the Server's log and handing each line to line (which may be nil).
func start(cmd *exec.Cmd, line func(string)) (*Server, error) {
	s := &Server{cmd: cmd, done: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			if s.log.Len() < 4<<20 {
				s.log.WriteString(sc.Text() + "\n")
			}
			s.mu.Unlock()
			if line != nil {
				line(sc.Text())
			}
		}
		r.Close()
	}()
	go func() {
		_ = cmd.Wait()
		<-copied
		close(s.done)
	}()
	return s, nil
}

// ReferenceOptions are the reference's settings beyond those
// StartReference sets, as NAME=value (SHADOW_MODE=true,
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, MERGE_DOMAIN_CONFIG=true).
type ReferenceOptions []string

// StartReference starts the reference's service on loopback with files as
// its configuration, counting in the redis-server at redisAddr, and waits
// until its gRPC listener is bound (at most 30 s). dir is a
// scratch directory it owns.
func StartReference(ctx context.Context, ref *Reference, dir, redisAddr string, files []File, opts ReferenceOptions) (*Server, error) {
	cfg := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(cfg, f.Name), f.Data, 0o644); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(ref.Service)
		cmd.Env = append([]string{
			"PATH=" + os.Getenv("PATH"),
			"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[1]),
			"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[2]),
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
			"USE_STATSD=false", "LOG_LEVEL=warn",
			"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"),
			"RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			// Keys expire at the end of their window, as floodgate's do;
			// the default adds up to 300 s of jitter.
			"EXPIRATION_JITTER_MAX_SECONDS=0",
		}, opts...)
		s, err := start(cmd, nil)
		if err != nil {
			return nil, err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))
		if err = waitServing(ctx, s, refReady); err == nil {
			return s, nil
		}
		s.Close()
		lastErr = fmt.Errorf("%w\n%s", err, tail(s.Log(), 20))
	}
	return nil, fmt.Errorf("envoydiff: the reference did not start: %w", lastErr)
}

var listening = regexp.MustCompile(`msg=listening listener=envoy addr=(\S+)`)

// StartFloodgate runs `floodgate serve` with the Redis engine at redisAddr
// and an envoy listener on a free loopback port serving files; envoy holds
// further lines of the envoy section (indented by two spaces), e.g.
// "shadow_mode: true". It waits until the listener is bound (at most
// 30 s).
func StartFloodgate(ctx context.Context, bin, dir, redisAddr string, files []File, envoy string) (*Server, error) {
	return StartFloodgateStorage(ctx, bin, dir, redisAddr, files, envoy, "redis")
}

// StartFloodgateStorage is StartFloodgate with the engine named: redis
// (failing open) or hybrid (a local filter holding each limit in front of
// Redis, for one instance).
func StartFloodgateStorage(ctx context.Context, bin, dir, redisAddr string, files []File, envoy, engine string) (*Server, error) {
	var names []string
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return nil, err
		}
		names = append(names, strconv.Quote(p))
	}
	var b strings.Builder
	switch engine {
	case "redis":
		fmt.Fprintf(&b, "storage:\n  engine: redis\n  redis:\n    addrs: [%s]\n  failure: {mode: fail_open, timeout: 2s}\n", redisAddr)
	case "hybrid":
		fmt.Fprintf(&b, "storage:\n  engine: hybrid\n  redis:\n    addrs: [%s]\n  hybrid: {instances: 1}\n", redisAddr)
	default:
		return nil, fmt.Errorf("envoydiff: engine %q: redis or hybrid", engine)
	}
	fmt.Fprintf(&b, "envoy:\n  listen: 127.0.0.1:0\n  ratelimit_config: [%s]\n", strings.Join(names, ", "))
	for _, l := range strings.Split(strings.TrimSpace(envoy), "\n") {
		if l != "" {
			b.WriteString("  " + l + "\n")
		}
	}
	b.WriteString("admin: {listen: \"\"}\n")
	file := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	s, err := start(exec.Command(bin, "serve", "-config", file), func(l string) {
		if m := listening.FindStringSubmatch(l); m != nil {
			select {
			case addr <- m[1]:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case a := <-addr:
		s.Addr = a
	case <-s.done:
		return nil, fmt.Errorf("envoydiff: floodgate exited:\n%s", tail(s.Log(), 20))
	case <-time.After(30 * time.Second):
		s.Close()
		return nil, fmt.Errorf("envoydiff: floodgate did not bind its envoy listener:\n%s", tail(s.Log(), 20))
	}
	if err := waitServing(ctx, s, listening); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitServing waits until s logged ready (its log matches ready) and its
// address accepts connections, or s exits, or 30 s pass. (The package
// speaks no gRPC itself: floodgate keeps gRPC in envoyrls; the callers'
// tests send the calls.)
func waitServing(ctx context.Context, s *Server, ready *regexp.Regexp) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.exited() {
			return errors.New("the server exited")
		}
		if ready.MatchString(s.Log()) {
			c, err := net.DialTimeout("tcp", s.Addr, time.Second)
			if err == nil {
				c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready at %s after 30 s", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// refReady is the reference's log line once its gRPC listener is bound
// (it binds it last, after loading its configuration).
var refReady = regexp.MustCompile(`Listening for gRPC on`)

// CheckReference runs the reference's configuration checker on files (one
// directory holding them) and reports its verdict: nil when it accepts them.
func CheckReference(ctx context.Context, ref *Reference, dir string, files []File, merge bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, ref.Check, "-config_dir", dir, "-merge_domain_configs="+strconv.FormatBool(merge))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s", tail(string(out), 3))
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
