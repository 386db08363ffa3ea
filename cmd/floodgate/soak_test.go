package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testkit"
)

// soakRSSBound is the most memory (peak resident set, VmHWM) the daemon
// may take while holding the soak's 4,000 hostile connections: about
// 100 KiB each (a header buffer of max_header_bytes, the server's and the
// upstream transport's buffers, their goroutines, and the garbage of those
// closed before the collector runs) over the daemon's own 20-odd MB.
// Without bounds the same attack took 1.8 GB. docs/operating.md quotes it.
const soakRSSBound = 400 << 20

// soakKinds are the hostile connections of the soak, 1,000 of each.
var soakKinds = []string{"huge_header", "slow_header", "slow_body", "idle"}

// TestSoakHostileConnections holds 1,000 connections of each hostile kind
// open against the proxy of a real daemon at once: an unterminated header of
// about 1 MB, a header sent a byte at a time, a body sent a byte at a time,
// and a kept-alive connection left idle. The daemon must close every one of
// them by its bounds (431 for the header, the header, body and idle
// timeouts), release every upstream request the slow bodies held, keep its
// peak memory under soakRSSBound, and answer its health probe and ordinary
// requests throughout.
func TestSoakHostileConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak holds 4,000 connections; make test runs it")
	}
	const perKind = 1000
	var inflight, upstreamDone atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		defer inflight.Add(-1)
		io.Copy(io.Discard, r.Body)
		upstreamDone.Add(1)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	d := startDaemon(t, fmt.Sprintf(`
policies:
  api: {rate: 1000000/s}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes: [{name: all, limits: [{policy: api}]}]
  # Every hostile connection is admitted (all come from 127.0.0.1), so that
  # what they hold is what is measured; the timeouts are short to keep the
  # test short.
  bounds: {max_connections: 5000, max_connections_per_client: 5000, header_timeout: 3s, body_timeout: 2s, idle_timeout: 2s}
admin: {listen: 127.0.0.1:0}
`, up.URL), "proxy", "admin")
	proxyAddr, adminAddr := d.addr("proxy"), d.addr("admin")

	// Probes: the health endpoint and an ordinary request through the
	// proxy, one after the other, until the attack is over.
	stopProbes := make(chan struct{})
	var probes, probeFailures atomic.Int64
	var probeErr atomic.Value
	var probeWG sync.WaitGroup
	probeWG.Go(func() {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-stopProbes:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, u := range []string{"http://" + adminAddr + "/healthz", "http://" + proxyAddr + "/probe"} {
				probes.Add(1)
				resp, err := client.Get(u)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("%s: status %d", u, resp.StatusCode)
					}
				}
				if err != nil {
					probeFailures.Add(1)
					probeErr.Store(err.Error())
				}
			}
		}
	})

	results := make(map[string]*soakResult, len(soakKinds))
	var wg sync.WaitGroup
	for _, kind := range soakKinds {
		res := &soakResult{}
		results[kind] = res
		wg.Go(func() {
			// Dial in steps, so that the kernel's accept queue never
			// overflows into SYN retries.
			var conns sync.WaitGroup
			for i := range perKind {
				if i%100 == 99 {
					time.Sleep(5 * time.Millisecond)
				}
				conns.Go(func() { res.add(attack(kind, proxyAddr)) })
			}
			conns.Wait()
		})
	}
	// The peak while everything is open; VmHWM keeps it afterwards.
	wg.Wait()
	close(stopProbes)
	probeWG.Wait()

	for _, kind := range soakKinds {
		r := results[kind]
		if r.ok != perKind {
			t.Errorf("%s: %d of %d connections were closed by the daemon's bounds; first error: %s", kind, r.ok, perKind, r.firstErr)
		}
	}
	testkit.Eventually(t, 30*time.Second, "every upstream request of a slow body released", func() bool { return inflight.Load() == 0 })
	peak := procStatus(t, d.cmd.Process.Pid, "VmHWM")
	t.Logf("daemon peak RSS %d MiB for %d hostile connections; %d probes", peak>>20, perKind*len(soakKinds), probes.Load())
	if peak > soakRSSBound {
		t.Errorf("daemon peak RSS %d MiB, over the bound of %d MiB", peak>>20, soakRSSBound>>20)
	}
	if n := probeFailures.Load(); n > 0 {
		t.Errorf("%d of %d probes failed during the attack, e.g. %v", n, probes.Load(), probeErr.Load())
	}
	if probes.Load() == 0 {
		t.Error("no probe ran during the attack")
	}
	if t.Failed() {
		logs := d.logs()
		t.Logf("daemon log (%d bytes), first lines:\n%.4000s", len(logs), logs)
	}
}

type soakResult struct {
	mu       sync.Mutex
	ok       int
	firstErr string
}

func (r *soakResult) add(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.ok++
	} else if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

// attack opens one hostile connection of kind and returns nil once the
// daemon has closed it as its bounds say, or what went otherwise. No
// connection is held past a minute, whatever the daemon does.
func attack(kind, addr string) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	// trickle writes one byte at a time until the daemon stops reading.
	trickle := func(b byte) {
		for {
			time.Sleep(250 * time.Millisecond)
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
	}
	// closed reads what the daemon answers until it closes the
	// connection; it returns the status of a response it got, 0 for none.
	closed := func() (int, error) {
		br := bufio.NewReader(c)
		status := 0
		if line, err := br.ReadString('\n'); err == nil {
			if f := strings.Fields(line); len(f) > 1 {
				status, _ = strconv.Atoi(f[1])
			}
		}
		_, err := io.Copy(io.Discard, br)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return status, fmt.Errorf("%s: the daemon held the connection for a minute", kind)
		}
		return status, nil // EOF or a reset: closed
	}
	switch kind {
	case "huge_header":
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: soak\r\nX-Huge: ")
		chunk := bytes.Repeat([]byte("a"), 16<<10)
		for sent := 0; sent < 1<<20; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				break // the daemon answered and closed
			}
		}
		status, err := closed()
		if err == nil && status != 431 && status != 0 {
			err = fmt.Errorf("huge_header answered %d, want 431", status)
		}
		return err
	case "slow_header":
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
		go trickle('a')
		_, err := closed()
		return err
	case "slow_body":
		io.WriteString(c, "POST /x HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000000\r\n\r\n")
		go trickle('b')
		_, err := closed()
		return err
	case "idle":
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: soak\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("idle: the daemon held the connection for a minute")
		}
		if err != nil {
			// On a starved machine the request itself can outlast
			// header_timeout; the connection is closed all the same.
			return nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// Kept alive, then left idle: the daemon closes it.
		_, err = br.ReadByte()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("idle: the daemon held the connection for a minute")
		}
		return nil
	}
	return fmt.Errorf("unknown kind %q", kind)
}

// procStatus reads a "kB" field of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
