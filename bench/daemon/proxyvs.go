package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate/internal/envoydiff"
)

// body64 is what every upstream answers: 64 bytes.
const body64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// runProxyVS loads floodgate serve's reverse proxy and nginx limit_req in
// front of one nginx upstream answering 64 bytes, with wrk, in rounds that
// rotate the order of the targets, and reports requests/s and the CPU per
// request of each target's processes (user+system, from /proc). The
// targets:
//
//	fg-on       floodgate serve, a route limited by client address that every request passes
//	fg-off      floodgate serve, no route (nothing decided)
//	fg-deny     floodgate serve, a limit of 10/s on the one client: nearly all answered 429
//	nginx-on    nginx limit_req keyed by $binary_remote_addr, a rate every request passes
//	nginx-deny  nginx limit_req at 10r/s, limit_req_status 429
//	bare-rp     httputil.ReverseProxy alone (SetURL, SetXForwarded, 1024 idle connections)
//	go-direct   a net/http server answering the 64 bytes itself
//	ngx-direct  the upstream nginx, loaded directly
//
// bare-rp and go-direct are the floors net/http and httputil put under any
// Go proxy; ngx-direct is nginx's.
func runProxyVS(args []string) error {
	fs := flag.NewFlagSet("proxyvs", flag.ExitOnError)
	d := fs.Duration("d", 5*time.Second, "duration of each wrk run")
	rounds := fs.Int("rounds", 5, "rounds; each runs every target once, in an order rotated per round")
	conns := fs.Int("c", 64, "wrk connections")
	threads := fs.Int("t", 2, "wrk threads")
	bin := fs.String("floodgate-bin", "", "a floodgate binary to run (default: build this tree's)")
	only := fs.String("targets", "", "comma-separated targets to run (default: all)")
	baseline := fs.String("baseline", "", "another floodgate binary (an older build) to run as fg-on@base and fg-deny@base beside this tree's")
	fs.Parse(args)
	if *d > 2*time.Minute {
		return errors.New("-d is at most 2m")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*rounds)*12*(*d+3*time.Second)+2*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "proxyvs")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	fg := *bin
	if fg == "" {
		if fg, err = envoydiff.BuildFloodgate(ctx, tmp); err != nil {
			return err
		}
	}
	ports, err := freePorts(16)
	if err != nil {
		return err
	}
	next := func() int { p := ports[0]; ports = ports[1:]; return p }
	upPort := next()
	upstream := fmt.Sprintf("http://127.0.0.1:%d", upPort)

	var procs []*exec.Cmd
	defer func() {
		// SIGTERM, not SIGKILL: an nginx master stops its workers.
		for _, c := range procs {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range procs {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.Process.Kill()
			}
		}
	}()
	start := func(name string, args ...string) (*exec.Cmd, error) {
		c := exec.CommandContext(ctx, name, args...)
		c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
		c.WaitDelay = 10 * time.Second
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, c)
		return c, nil
	}

	// The upstream: nginx, one worker, so its CPU is not the proxies'.
	upDir := filepath.Join(tmp, "upstream")
	upConf := nginxConf(upDir, 1, fmt.Sprintf(`server { listen 127.0.0.1:%d; location / { default_type text/plain; return 200 "%s"; } }`, upPort, body64))
	up, err := startNginx(start, upDir, upConf)
	if err != nil {
		return err
	}

	type target struct {
		name string
		port int
		pids func() []int
		deny bool
		runs []vsRun
	}
	var targets []*target
	add := func(name string, port int, pids func() []int, deny bool) {
		targets = append(targets, &target{name: name, port: port, pids: pids, deny: deny})
	}
	pidOf := func(c *exec.Cmd) func() []int { return func() []int { return []int{c.Process.Pid} } }

	// floodgate serve, three configurations, one process each.
	type fgSpec struct {
		name, bin, routes string
		deny              bool
	}
	specs := []fgSpec{
		{"fg-on", fg, "routes: [{name: all, limits: [{policy: api, key: ip}]}]", false},
		{"fg-off", fg, "routes: []", false},
		{"fg-deny", fg, "routes: [{name: all, limits: [{policy: slow, key: ip}]}]", true},
	}
	if *baseline != "" {
		specs = append(specs, fgSpec{"fg-on@base", *baseline, specs[0].routes, false}, fgSpec{"fg-deny@base", *baseline, specs[2].routes, true})
	}
	for _, spec := range specs {
		port, admin := next(), next()
		conf := fmt.Sprintf(`storage: {engine: memory}
policies:
  api: {rate: 1000000000/s}
  slow: {rate: 10/s}
proxy:
  listen: 127.0.0.1:%d
  upstream: %s
  %s
admin: {listen: 127.0.0.1:%d}
log: {level: error}
`, port, upstream, spec.routes, admin)
		file := filepath.Join(tmp, strings.ReplaceAll(spec.name, "@", "-")+".yaml")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			return err
		}
		c, err := start(spec.bin, "serve", "-config", file)
		if err != nil {
			return err
		}
		add(spec.name, port, pidOf(c), spec.deny)
	}

	// nginx limit_req, allowed and denied, two workers as floodgate has
	// two cores.
	ngxOn, ngxDeny := next(), next()
	ngxDir := filepath.Join(tmp, "front")
	ngxConf := nginxConf(ngxDir, 2, fmt.Sprintf(`
	limit_req_zone $binary_remote_addr zone=api:10m rate=1000000r/s;
	limit_req_zone $binary_remote_addr zone=slow:10m rate=10r/s;
	limit_req_status 429;
	upstream up { server 127.0.0.1:%d; keepalive 256; }
	server {
		listen 127.0.0.1:%d;
		location / { limit_req zone=api burst=1000000 nodelay; proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
	}
	server {
		listen 127.0.0.1:%d;
		location / { limit_req zone=slow nodelay; proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
	}`, upPort, ngxOn, ngxDeny))
	front, err := startNginx(start, ngxDir, ngxConf)
	if err != nil {
		return err
	}
	add("nginx-on", ngxOn, func() []int { return nginxPids(front) }, false)
	add("nginx-deny", ngxDeny, func() []int { return nginxPids(front) }, true)

	// The floors: this binary as a bare reverse proxy and as a server.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bareRP, direct := next(), next()
	c, err := start(self, "bareproxy", "-listen", fmt.Sprintf("127.0.0.1:%d", bareRP), "-upstream", upstream)
	if err != nil {
		return err
	}
	add("bare-rp", bareRP, pidOf(c), false)
	c, err = start(self, "upstream", "-listen", fmt.Sprintf("127.0.0.1:%d", direct), "-body64")
	if err != nil {
		return err
	}
	add("go-direct", direct, pidOf(c), false)
	add("ngx-direct", upPort, func() []int { return nginxPids(up) }, false)

	if *only != "" {
		want := strings.Split(*only, ",")
		targets = slices.DeleteFunc(targets, func(t *target) bool { return !slices.Contains(want, t.name) })
	}
	for _, t := range targets {
		if err := waitPort(ctx, t.port); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	// Warm every target's connections (upstream pools, the proxies' heaps).
	for _, t := range targets {
		if _, err := runWrk(ctx, t.port, *threads, *conns, time.Second); err != nil {
			return fmt.Errorf("%s warm-up: %w", t.name, err)
		}
	}
	fmt.Printf("# %s; %s; load %s\n", machine(), goVersion(), loadavg())
	fmt.Printf("# wrk -t%d -c%d -d%s, %d rounds, order rotated per round; upstream nginx answering %d bytes\n", *threads, *conns, *d, *rounds, len(body64))
	loads := []string{loadavg()}
	for r := range *rounds {
		k := r % len(targets)
		order := append(slices.Clone(targets[k:]), targets[:k]...)
		for _, t := range order {
			pids := t.pids()
			cpu0, err := sumCPU(pids)
			if err != nil {
				return err
			}
			up0, _ := sumCPU(nginxPids(up))
			w, err := runWrk(ctx, t.port, *threads, *conns, *d)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			cpu1, err := sumCPU(pids)
			if err != nil {
				return err
			}
			up1, _ := sumCPU(nginxPids(up))
			run := vsRun{vsWrk: w,
				cpu:   float64(cpu1-cpu0) / float64(w.requests) / float64(time.Microsecond),
				upCPU: float64(up1-up0) / float64(w.requests) / float64(time.Microsecond)}
			t.runs = append(t.runs, run)
			fmt.Printf("round=%d target=%s requests/s=%.0f cpu/request=%.1fµs upstream-cpu/request=%.1fµs p99=%s non2xx=%d/%d load=%s\n",
				r+1, t.name, w.rps, run.cpu, run.upCPU, w.p99, w.non2xx, w.requests, loadavg())
			if t.deny && float64(w.non2xx) < 0.9*float64(w.requests) {
				return fmt.Errorf("%s: only %d of %d requests denied", t.name, w.non2xx, w.requests)
			}
			if !t.deny && w.non2xx > 0 {
				return fmt.Errorf("%s: %d of %d requests not answered 2xx", t.name, w.non2xx, w.requests)
			}
		}
		loads = append(loads, loadavg())
	}
	byName := map[string]*target{}
	fmt.Printf("# medians over rounds\n")
	for _, t := range targets {
		byName[t.name] = t
		fmt.Printf("%-10s requests/s=%.0f cpu/request=%.1fµs p99=%s\n", t.name,
			median(t.runs, func(r vsRun) float64 { return r.rps }),
			median(t.runs, func(r vsRun) float64 { return r.cpu }),
			time.Duration(median(t.runs, func(r vsRun) float64 { return float64(r.p99) })))
	}
	fmt.Printf("# ratios within each round: median (min–max); load averages %s\n", strings.Join(loads, " → "))
	for _, c := range []struct{ a, b, what, target string }{
		{"fg-on", "nginx-on", "allowed: floodgate ÷ nginx", "rps ≥ 0.8, cpu ≤ 2"},
		{"fg-deny", "nginx-deny", "denied: floodgate ÷ nginx", "rps ≥ 1"},
		{"fg-on", "fg-off", "floodgate limiting on ÷ off", "rps ≥ 0.95"},
		{"fg-off", "bare-rp", "floodgate off ÷ bare httputil.ReverseProxy", ""},
		{"fg-on", "bare-rp", "floodgate on ÷ bare httputil.ReverseProxy", ""},
		{"bare-rp", "nginx-on", "bare httputil.ReverseProxy ÷ nginx", "the floor"},
		{"go-direct", "ngx-direct", "bare net/http server ÷ nginx serving", "the floor"},
		{"fg-deny", "go-direct", "floodgate denied ÷ bare net/http server", ""},
		{"fg-on", "fg-on@base", "allowed: this tree ÷ the baseline binary", ""},
		{"fg-deny", "fg-deny@base", "denied: this tree ÷ the baseline binary", ""},
	} {
		a, b := byName[c.a], byName[c.b]
		if a == nil || b == nil {
			continue
		}
		fmt.Printf("%-48s requests/s %s  cpu/request %s  %s\n", c.what,
			ratios(a.runs, b.runs, func(r vsRun) float64 { return r.rps }),
			ratios(a.runs, b.runs, func(r vsRun) float64 { return r.cpu }), c.target)
	}
	return nil
}

type vsWrk struct {
	rps              float64
	requests, non2xx int64
	p99              time.Duration
}

type vsRun struct {
	vsWrk
	cpu, upCPU float64 // µs of user+system CPU per request: the target's, the upstream's
}

func median(runs []vsRun, f func(vsRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// ratios is the median of a's ÷ b's per round, with their range.
func ratios(a, b []vsRun, f func(vsRun) float64) string {
	var v []float64
	for i := range min(len(a), len(b)) {
		if y := f(b[i]); y > 0 {
			v = append(v, f(a[i])/y)
		}
	}
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", v[len(v)/2], v[0], v[len(v)-1])
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	wrkP99      = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s)`)
)

func runWrk(ctx context.Context, port, threads, conns int, d time.Duration) (vsWrk, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "wrk", "-t"+strconv.Itoa(threads), "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(secs)+"s", "--latency",
		fmt.Sprintf("http://127.0.0.1:%d/", port)).CombinedOutput()
	if err != nil {
		return vsWrk{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	var w vsWrk
	m := wrkRequests.FindSubmatch(out)
	if m == nil {
		return vsWrk{}, fmt.Errorf("wrk output: %s", out)
	}
	w.requests, _ = strconv.ParseInt(string(m[1]), 10, 64)
	if m := wrkRPS.FindSubmatch(out); m != nil {
		w.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		w.non2xx, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := wrkP99.FindSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[2])]
		w.p99 = time.Duration(v * float64(unit))
	}
	if w.requests == 0 {
		return vsWrk{}, fmt.Errorf("wrk made no request: %s", out)
	}
	return w, nil
}

func nginxConf(dir string, workers int, http string) string {
	return fmt.Sprintf(`worker_processes %d;
daemon off;
master_process on;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[2]s/body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	%[3]s
}
`, workers, dir, http)
}

func startNginx(start func(string, ...string) (*exec.Cmd, error), dir, conf string) (*exec.Cmd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return start("/usr/sbin/nginx", "-p", dir, "-c", file, "-e", filepath.Join(dir, "error.log"))
}

// nginxPids is an nginx master and its workers.
func nginxPids(master *exec.Cmd) []int {
	pids := []int{master.Process.Pid}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", master.Process.Pid, master.Process.Pid))
	if err != nil {
		return pids
	}
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

func sumCPU(pids []int) (time.Duration, error) {
	var t time.Duration
	for _, p := range pids {
		c, err := procCPU(p)
		if err != nil {
			return 0, err
		}
		t += c
	}
	return t, nil
}

func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func waitPort(ctx context.Context, port int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on 127.0.0.1:%d", port)
}

func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return "go ?"
	}
	return strings.TrimSpace(string(out))
}

// runBareProxy serves httputil.ReverseProxy with nothing of floodgate's:
// the floor of any proxy built on it.
func runBareProxy(args []string) error {
	fs := flag.NewFlagSet("bareproxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:9003", "address")
	upstream := fs.String("upstream", "http://127.0.0.1:9001", "upstream URL")
	max := fs.Duration("max", 10*time.Minute, "stop after")
	fs.Parse(args)
	u, err := url.Parse(*upstream)
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: tr,
		ErrorLog:  slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn),
	}
	return serveFor(*listen, rp, *max)
}
