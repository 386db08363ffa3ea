package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/testkit"
)

// binary is the floodgate command built once for every test here: the
// end-to-end tests run it as a user does.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "floodgate")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// A daemon is one running `floodgate serve`.
type daemonProc struct {
	cmd   *exec.Cmd
	addrs map[string]string // listener → address
	file  string
	mu    sync.Mutex
	log   bytes.Buffer
}

func (d *daemonProc) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

var listening = regexp.MustCompile(`msg=listening listener=(\w+) addr=(\S+)`)

// startDaemon writes yaml to a file and serves it, waiting until every
// listener in want is bound. Listeners should use port 0.
func startDaemon(t *testing.T, yaml string, want ...string) *daemonProc {
	t.Helper()
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{file: file, addrs: map[string]string{}}
	d.cmd = exec.Command(binary, "serve", "-config", file)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		closed := false
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.log.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				d.addrs[m[1]] = m[2]
			}
			all := true
			for _, w := range want {
				if d.addrs[w] == "" {
					all = false
				}
			}
			d.mu.Unlock()
			if all && !closed {
				close(found)
				closed = true
			}
		}
	}()
	t.Cleanup(func() { d.stop(t) })
	select {
	case <-found:
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon did not bind %v:\n%s", want, d.logs())
	}
	return d
}

func (d *daemonProc) addr(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.addrs[name]
	if strings.HasPrefix(a, "[::]:") {
		a = "127.0.0.1:" + strings.TrimPrefix(a, "[::]:")
	}
	return a
}

func (d *daemonProc) stop(t *testing.T) {
	if d.cmd.ProcessState != nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-done
		t.Errorf("daemon did not stop on SIGTERM:\n%s", d.logs())
	}
}

// upstream is the service behind the proxy in these tests.
func upstream(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "yes")
		if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "hello from upstream\n")
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestProxyCheckAndCLI(t *testing.T) {
	up := upstream(t)
	d := startDaemon(t, fmt.Sprintf(`
policies:
  api: {rate: 3/min}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: all
      limits: [{policy: api, key: ip}]
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
`, up), "proxy", "check", "admin")
	base := "http://" + d.addr("proxy")
	for i := range 3 {
		resp := get(t, base+"/x")
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "yes" || resp.Header.Get("Ratelimit-Policy") != `"api";q=3;w=60` {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
		}
	}
	resp := get(t, base+"/x")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Upstream") != "" {
		t.Fatalf("4th request: %d %v, want 429 with Retry-After and no upstream", resp.StatusCode, resp.Header)
	}
	// A spoofed X-Forwarded-For from an untrusted peer changes nothing.
	for i := range 20 {
		if resp := get(t, base+"/x", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)); resp.StatusCode != 429 {
			t.Fatalf("spoofed X-Forwarded-For %d got %d, want 429: limited as one client", i, resp.StatusCode)
		}
	}

	// The check API and the CLI over it.
	var out, errOut bytes.Buffer
	checkAddr := "http://" + d.addr("check")
	code := run([]string{"check", "-addr", checkAddr, "-policy", "api", "-key", "user:42"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), `"allowed": true`) {
		t.Fatalf("floodgate check: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run([]string{"check", "-addr", checkAddr, "-policy", "api", "-key", "user:42", "-cost", "5"}, &out, &errOut); code != 1 || !strings.Contains(out.String(), "429") {
		t.Fatalf("floodgate check over capacity: exit %d\n%s", code, out.String())
	}
	if code := run([]string{"check", "-addr", checkAddr, "-policy", "nope", "-key", "k"}, &out, &errOut); code != 2 {
		t.Fatalf("floodgate check of an unknown policy: exit %d, want 2", code)
	}

	// Admin: metrics count the decisions; the proxy never serves admin routes.
	admin := "http://" + d.addr("admin")
	mresp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !regexp.MustCompile(`floodgate_decisions_total\{decision="denied",policy="api",source="memory"\} 2[0-9]`).Match(body) {
		t.Errorf("metrics do not count the 21 denials:\n%s", grepLines(string(body), "floodgate_decisions_total"))
	}
	if resp := get(t, base+"/metrics"); resp.Header.Get("X-Upstream") != "yes" && resp.StatusCode != 429 {
		t.Errorf("the proxy answered /metrics itself: %d", resp.StatusCode)
	}
	if resp := get(t, admin+"/readyz"); resp.StatusCode != 200 {
		t.Errorf("/readyz: %d", resp.StatusCode)
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestValidate(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  api:\n    ratee: 5/min\n  web:\n    rate: 0/s\n"), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", bad}, &out, &errOut); code != 1 {
		t.Fatalf("validate of a bad file: exit %d", code)
	}
	for _, want := range []string{"bad.yaml:3:5", "ratee", "rate", "bad.yaml:5:11"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("validate output lacks %q:\n%s", want, errOut.String())
		}
	}
	// The production example takes its secrets from the environment.
	t.Setenv("REDIS_PASSWORD", "secret")
	t.Setenv("ADMIN_TOKEN", "token")
	for _, f := range []string{"../../examples/config/photoplaces-production.yaml", "../../examples/config/envoy.yaml"} {
		out.Reset()
		errOut.Reset()
		if code := run([]string{"validate", f}, &out, &errOut); code != 0 {
			t.Errorf("validate %s: exit %d\n%s", f, code, errOut.String())
		}
	}
}

// TestEnvoyConfigUnchanged: an envoyproxy/ratelimit configuration file,
// loaded as it is, answers Envoy's ShouldRateLimit as documented.
func TestEnvoyConfigUnchanged(t *testing.T) {
	rules, err := filepath.Abs("../../examples/envoy/ratelimit-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, fmt.Sprintf(`
envoy:
  listen: 127.0.0.1:0
  ratelimit_config: [%s]
  response_headers: ietf
admin: {listen: ""}
`, rules), "envoy")
	conn, err := grpc.NewClient(d.addr("envoy"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(addr string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 10 {
		if r := ask("192.0.2.1"); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d within 10/s: %v", i+1, r.OverallCode)
		}
	}
	r := ask("192.0.2.1")
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Fatalf("11th request: %v", r)
	}
	if ask("192.0.2.2").OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatal("another address shares the first one's bucket")
	}
	if r := ask("50.0.0.5"); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the blocked address (requests_per_unit 0): %v", r.OverallCode)
	}

	// replaces: a partner's writes are limited by the partner limit
	// (600/min), which replaces write_per_ip (30/min), not by both.
	entries := func(kv ...string) *commonrl.RateLimitDescriptor {
		d := &commonrl.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	write := func(descs ...*commonrl.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i := range 40 {
		if code := write(entries("header_match", "write", "remote_address", "192.0.2.9"), entries("api_key", "partner-1", "remote_address", "192.0.2.9")); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("partner write %d: %v; write_per_ip should be replaced", i+1, code)
		}
	}
	for i := range 31 {
		code := write(entries("header_match", "write", "remote_address", "192.0.2.10"))
		if want := rlsv3.RateLimitResponse_OK; i == 30 {
			if code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("the 31st write of a non-partner: %v, want OVER_LIMIT by write_per_ip", code)
			}
		} else if code != want {
			t.Fatalf("non-partner write %d: %v", i+1, code)
		}
	}
}

// TestReloadUnderLoad: the file is rewritten while clients keep the proxy
// busy; every request is answered (200 or 429, never an error), and the new
// limits take effect.
func TestReloadUnderLoad(t *testing.T) {
	up := upstream(t)
	conf := func(rate int) string {
		return fmt.Sprintf(`
policies:
  api: {rate: %d/min}
  kept: {rate: 2/h}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: kept
      match: {path_prefix: [/kept]}
      limits: [{policy: kept, key: ip}]
    - name: all
      limits: [{policy: api, key: "header:X-Client"}]
admin: {listen: 127.0.0.1:0}
`, rate, up)
	}
	d := startDaemon(t, conf(1000), "proxy", "admin")
	base := "http://" + d.addr("proxy")
	// A client mid-limit on a policy that does not change stays limited.
	get(t, base+"/kept")
	get(t, base+"/kept")
	if resp := get(t, base+"/kept"); resp.StatusCode != 429 {
		t.Fatalf("kept policy: %d, want 429", resp.StatusCode)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				req, _ := http.NewRequest("GET", base+"/", nil)
				req.Header.Set("X-Client", fmt.Sprintf("c%d-%d", w, i%50))
				resp, err := client.Do(req)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 429 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, resp.Status)
				}
			}
		})
	}
	reloadsBefore := metric(t, d, `floodgate_config_reloads_total{result="success"}`)
	for i := range 10 {
		if err := os.WriteFile(d.file, []byte(conf(2000+i)), 0o644); err != nil {
			t.Fatal(err)
		}
		waitMetric(t, d, `floodgate_config_reloads_total{result="success"}`, reloadsBefore+float64(i+1))
	}
	// A bad file is rejected and counted; the last good one keeps serving.
	os.WriteFile(d.file, []byte("policies: {api: {rate: nope}}\n"), 0o644)
	waitMetric(t, d, "floodgate_config_reload_errors_total", 1)
	cancel()
	wg.Wait()
	if failed.Load() != 0 || sent.Load() < 100 {
		t.Fatalf("%d of %d requests failed during reloads (first: %v)", failed.Load(), sent.Load(), firstErr.Load())
	}
	resp := get(t, base+"/", "X-Client", "fresh")
	if got := resp.Header.Get("Ratelimit-Policy"); got != `"api";q=2009;w=60` {
		t.Errorf("after the reloads RateLimit-Policy is %q, want the last good limit 2009/min", got)
	}
	if resp := get(t, base+"/kept"); resp.StatusCode != 429 {
		t.Errorf("the unchanged policy forgot its client across reloads: %d", resp.StatusCode)
	}
}

func metric(t *testing.T, d *daemonProc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.addr("admin") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

func waitMetric(t *testing.T, d *daemonProc, name string, atLeast float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, d, name) < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed below %g:\n%s", name, atLeast, d.logs())
		}
		time.Sleep(20 * time.Millisecond) // polling an HTTP endpoint, not waiting out a race
	}
}

func redisConf(addr, mode, up string) string {
	return fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%s]}
  failure: {mode: %s, timeout: 100ms}
policies:
  api: {rate: 300/h}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  headers: {source: true}
  routes:
    - limits: [{policy: api, key: global}]
admin: {listen: 127.0.0.1:0}
`, addr, mode, up)
}

// TestDaemonsShareRedis: three daemons on one redis-server admit the
// global limit, not three times it.
func TestDaemonsShareRedis(t *testing.T) {
	r := testkit.Redis(t)
	up := upstream(t)
	var ds []*daemonProc
	for range 3 {
		ds = append(ds, startDaemon(t, redisConf(r.Addr, "fail_closed", up), "proxy"))
	}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		d := ds[i%3]
		wg.Go(func() {
			for range 60 {
				resp, err := http.Get("http://" + d.addr("proxy") + "/")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					allowed.Add(1)
				case 429:
					denied.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	// 720 requests in well under an hour against 300/h: 300 pass, give or
	// take the units refilled while the test ran (one per 12 s).
	if a := allowed.Load(); a < 300 || a > 303 {
		t.Fatalf("three daemons admitted %d of %d, want the shared 300 (+1%%)", a, allowed.Load()+denied.Load())
	}
}

// TestRedisKilled: with Redis gone, each failure mode does what it
// promises, within the failure timeout.
func TestRedisKilled(t *testing.T) {
	up := upstream(t)
	for _, tc := range []struct {
		mode   string
		status int
		source string
	}{
		{"fail_closed", 503, "fail-closed"},
		{"fail_open", 200, "fail-open"},
		{"local_fallback", 200, "local-fallback"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := testkit.Redis(t)
			d := startDaemon(t, redisConf(r.Addr, tc.mode, up), "proxy", "admin")
			base := "http://" + d.addr("proxy")
			if resp := get(t, base+"/"); resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Source") != "redis" {
				t.Fatalf("with Redis: %d %q", resp.StatusCode, resp.Header.Get("X-Ratelimit-Source"))
			}
			r.Kill()
			for i := range 20 {
				start := time.Now()
				resp := get(t, base+"/")
				took := time.Since(start)
				if resp.StatusCode != tc.status || resp.Header.Get("X-Ratelimit-Source") != tc.source {
					t.Fatalf("request %d with Redis down: %d %q, want %d %q", i+1, resp.StatusCode, resp.Header.Get("X-Ratelimit-Source"), tc.status, tc.source)
				}
				if took > 5*time.Second {
					t.Fatalf("request %d took %s with a 100ms failure timeout", i+1, took)
				}
			}
			if n := metric(t, d, `floodgate_engine_errors_total{engine="redis",op="decide"}`); n < 1 {
				t.Errorf("no Redis error counted (%g)", n)
			}
			if tc.mode == "fail_closed" {
				if resp := get(t, "http://"+d.addr("admin")+"/readyz"); resp.StatusCode == 200 {
					t.Errorf("/readyz is 200 with Redis down under fail_closed")
				}
			}
		})
	}
}

// TestServeDefaults runs the README's first command: no file, the built-in
// defaults on their fixed ports.
func TestServeDefaults(t *testing.T) {
	for _, port := range []string{"8080", "8081", "9090"} {
		if l, err := net.Listen("tcp", "127.0.0.1:"+port); err != nil {
			t.Fatalf("port %s is taken; the default configuration needs it: %v", port, err)
		} else {
			l.Close()
		}
	}
	cmd := exec.Command(binary, "serve")
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var resp *http.Response
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get("http://127.0.0.1:8080/")
		if err == nil {
			resp = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default proxy did not answer: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // waiting for the process to bind
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Ratelimit-Policy") == "" || !strings.Contains(strings.ToLower(string(b)), "demo") {
		t.Fatalf("default proxy: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	codes := []int{}
	for range 6 {
		codes = append(codes, get(t, "http://127.0.0.1:8080/").StatusCode)
	}
	if codes[len(codes)-1] != 429 {
		t.Errorf("the default limit (burst 5) never answered 429: %v", codes)
	}
	if !strings.Contains(stderr.String(), "curl") || !strings.Contains(stderr.String(), "8080") {
		t.Errorf("the banner does not say how to try it:\n%s", stderr.String())
	}
}

// TestPostgresListener: `floodgate serve` with a postgres listener limits
// psql's queries per user; the limited query gets SQLSTATE 53400 and the
// session goes on.
func TestPostgresListener(t *testing.T) {
	pg := testkit.Postgres(t)
	d := startDaemon(t, fmt.Sprintf(`
postgres:
  listen: 127.0.0.1:0
  upstream: %s
  rate_limit:
    global: {rate: 1000/s, burst: 100}
    per_user: {rate: 3/h, overrides: {batch_worker: {rate: 100/h}}}
  connections:
    per_ip: {rate: 4/h}
admin: {listen: ""}
`, pg.Addr), "postgres")
	host, port, _ := net.SplitHostPort(d.addr("postgres"))
	dsn := fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", testkit.PostgresSuperuser, net.JoinHostPort(host, port))
	// One session: three queries pass, the fourth is refused, and the
	// session is still usable for the next (also refused) query.
	out, err := pg.Psql(dsn, "select 1;\nselect 2;\nselect 3;\n")
	if err != nil || out != "1\n2\n3" {
		t.Fatalf("three queries within the limit: %q, %v", out, err)
	}
	_, err = pg.Psql(dsn, "select 4;")
	if err == nil || !strings.Contains(err.Error(), "rate limit exceeded") {
		t.Fatalf("the fourth query: %v, want a rate-limit error", err)
	}
	if !strings.Contains(err.Error(), "per_user") && !strings.Contains(err.Error(), "user") {
		t.Errorf("the error does not name the scope: %v", err)
	}
	// Two connections so far from this address, of the 4 an hour allowed:
	// two more open, the fifth is refused before authentication.
	for i := range 2 {
		if _, err := pg.Psql(dsn, ""); err != nil {
			t.Fatalf("connection %d within the limit: %v", i+3, err)
		}
	}
	if _, err := pg.Psql(dsn, ""); err == nil || !strings.Contains(err.Error(), "FATAL") {
		t.Fatalf("the fifth connection: %v, want FATAL (53300)", err)
	}
}
