package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/config"
)

// configFile writes a configuration with one route "api" under /api whose
// limit is the policy "api" at rate, keyed by key, and loads it.
func configFile(t *testing.T, name, rate, key string) *config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`storage:
  engine: memory
policies:
  api:
    rate: %s
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  client_ip:
    trusted_proxies: ["10.0.0.0/8"]
  routes:
    - name: api
      match:
        path_prefix: ["/api"]
      limits:
        - policy: api
          key: %s
    - name: health
      match:
        path: /healthz
`, rate, key)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// burstLog is the traffic of the tests in every format: client 192.0.2.1
// sends 20 requests to /api in its first second and 20 more 60 seconds
// later; 192.0.2.2 sends 3; one /healthz and one path no route matches.
type logReq struct {
	at     time.Duration
	peer   string
	method string
	path   string
	status int
}

func burstTraffic() []logReq {
	var out []logReq
	for _, base := range []time.Duration{0, time.Minute} {
		for i := range 20 {
			out = append(out, logReq{base + time.Duration(i)*10*time.Millisecond, "192.0.2.1", "GET", fmt.Sprintf("/api/items/%d?x=1", i), 200})
		}
	}
	for i := range 3 {
		out = append(out, logReq{2*time.Minute + time.Duration(i)*time.Second, "192.0.2.2", "POST", "/api/orders", 201})
	}
	out = append(out, logReq{3 * time.Minute, "192.0.2.3", "GET", "/healthz", 200})
	out = append(out, logReq{3 * time.Minute, "192.0.2.3", "GET", "/other", 404})
	return out
}

func nginxLog(reqs []logReq) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" %d 612 \"-\" \"curl/8.5.0\"\n",
			r.peer, t0.Add(r.at).In(time.FixedZone("", 3600)).Format(nginxTime), r.method, r.path, r.status)
	}
	return b.String()
}

func envoyLog(reqs []logReq) string {
	var b strings.Builder
	for _, r := range reqs {
		// Envoy behind a load balancer at 10.1.1.1: X-Forwarded-For is
		// the client, then the balancer Envoy saw.
		fmt.Fprintf(&b, "[%s] \"%s %s HTTP/1.1\" %d - 0 612 3 2 \"%s,10.1.1.1\" \"curl/8.5.0\" \"5f1b0c6e-2d1a-4f6e-9c33-0d6a2f7d5e10\" \"api.example.com\" \"10.0.0.9:8080\"\n",
			t0.Add(r.at).Format("2006-01-02T15:04:05.000Z"), r.method, r.path, r.status, r.peer)
	}
	return b.String()
}

func jsonLog(reqs []logReq) string {
	var b strings.Builder
	for _, r := range reqs {
		line, _ := json.Marshal(map[string]any{
			"time": t0.Add(r.at).Format(time.RFC3339Nano), "method": r.method, "path": r.path,
			"host": "api.example.com", "peer": r.peer + ":40000", "status": r.status,
			"headers": map[string]any{"User-Agent": "curl/8.5.0"},
		})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func run(t *testing.T, log string, cand, against *config.Config, o RunOptions) *Report {
	t.Helper()
	rep, err := Run(context.Background(), strings.NewReader(log), cand, against, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func row(t *testing.T, rows []Row, name string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", name, rows)
	return Row{}
}

// A tighter limit denies exactly what its rate leaves over: 5/min lets 5
// of each burst of 20 through (the refill after a minute is whole), so 30
// of 43 /api requests are denied, where 100/min denied none; every flip
// is client 192.0.2.1's, in every log format.
func TestTighterLimitDeniesExactly(t *testing.T) {
	cand := configFile(t, "candidate.yaml", "5/min", "ip")
	cur := configFile(t, "current.yaml", "100/min", "ip")
	traffic := burstTraffic()
	for _, tc := range []struct {
		name   string
		log    string
		format Format
	}{
		{"nginx", nginxLog(traffic), FormatNginx},
		{"envoy", envoyLog(traffic), FormatEnvoy},
		{"json", jsonLog(traffic), FormatJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "access.log")
			if err := os.WriteFile(path, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rep, err := Run(context.Background(), f, cand, cur, RunOptions{RawKeys: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Format != tc.format || rep.Requests != int64(len(traffic)) || rep.Malformed != 0 {
				t.Fatalf("format %s, %d requests, %d malformed (%v); want %s, %d, 0", rep.Format, rep.Requests, rep.Malformed, rep.Examples, tc.format, len(traffic))
			}
			api := row(t, rep.Routes, "api")
			if api.Requests != 43 || api.Allowed != 13 || api.Denied != 30 {
				t.Errorf("candidate api %+v; want 43 requests, 13 allowed, 30 denied", api.Counts)
			}
			if a := api.Against; a == nil || a.Allowed != 43 || a.Denied != 0 {
				t.Errorf("current api %+v; want 43 allowed", a)
			}
			if api.Change.Denied != 30 || api.Change.Allowed != -30 {
				t.Errorf("change %+v; want +30 denied, -30 allowed", api.Change)
			}
			pol := row(t, rep.Policies, "api")
			if pol.Requests != 43 || pol.Denied != 30 {
				t.Errorf("policy api %+v; want 43 requests, 30 denied", pol.Counts)
			}
			if h := row(t, rep.Routes, "health"); h.Requests != 1 || h.Allowed != 1 {
				t.Errorf("health %+v; want 1 allowed", h.Counts)
			}
			if n := row(t, rep.Routes, NoRoute); n.Requests != 1 {
				t.Errorf("no route %+v; want 1", n.Counts)
			}
			if rep.Flipped.Denied != 30 || rep.Flipped.Allowed != 0 || len(rep.Flips) != 1 {
				t.Fatalf("flipped %+v, flips %+v; want 30 newly denied, one key", rep.Flipped, rep.Flips)
			}
			if f := rep.Flips[0]; f.Key != "192.0.2.1" || f.Policy != "api" || f.Route != "api" || f.NewlyDenied != 30 {
				t.Errorf("flip %+v; want 192.0.2.1 under api, 30 newly denied", f)
			}
		})
	}
}

// Swapping the configurations turns the flips around, and a key function
// other than the address (a header) keys the flips by it.
func TestFlipsBothWaysAndByHeader(t *testing.T) {
	tight := configFile(t, "tight.yaml", "5/min", "header:X-Api-Key")
	loose := configFile(t, "loose.yaml", "100/min", "header:X-Api-Key")
	var b strings.Builder
	for i := range 12 {
		fmt.Fprintf(&b, `{"time":%d.%03d,"method":"GET","path":"/api/x","peer":"192.0.2.%d","headers":{"X-Api-Key":"k-1"},"status":200}`+"\n",
			t0.Unix(), i, i+1)
	}
	rep := run(t, b.String(), loose, tight, RunOptions{RawKeys: true})
	if rep.Flipped.Allowed != 7 || rep.Flipped.Denied != 0 {
		t.Fatalf("flipped %+v; want 7 newly allowed", rep.Flipped)
	}
	if f := rep.Flips[0]; f.Key != "x-api-key:k-1" || f.NewlyAllowed != 7 {
		t.Errorf("flip %+v; want x-api-key:k-1 7 newly allowed", f)
	}
	red := run(t, b.String(), loose, tight, RunOptions{})
	if k := red.Flips[0].Key; strings.Contains(k, "k-1") {
		t.Errorf("redacted key %q shows the key", k)
	}
}

// Count rules settle with the logged status: a login limit that counts
// failures only denies after failed attempts.
func TestCountRulesUseLoggedStatus(t *testing.T) {
	yaml := `policies:
  login:
    rate: 3/hour
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  routes:
    - name: login
      match: {path: /login}
      limits:
        - policy: login
          key: ip
          count: failed
`
	path := filepath.Join(t.TempDir(), "login.yaml")
	os.WriteFile(path, []byte(yaml), 0o600)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []logReq
	for i := range 10 {
		reqs = append(reqs, logReq{time.Duration(i) * time.Second, "192.0.2.1", "POST", "/login", 200}) // successes: refunded
	}
	for i := range 5 {
		reqs = append(reqs, logReq{time.Minute + time.Duration(i)*time.Second, "192.0.2.1", "POST", "/login", 401})
	}
	rep := run(t, nginxLog(reqs), cfg, nil, RunOptions{})
	if r := row(t, rep.Routes, "login"); r.Allowed != 13 || r.Denied != 2 {
		t.Errorf("login %+v; want 13 allowed (10 successes, 3 failures), 2 denied", r.Counts)
	}
	if rep.Flipped != nil || rep.Against != "" {
		t.Errorf("a report without -against has flips: %+v", rep.Flipped)
	}
}

// Malformed lines are counted by reason and quoted, never fatal; the good
// lines around them are replayed.
func TestMalformedLinesCounted(t *testing.T) {
	cfg := configFile(t, "c.yaml", "5/min", "ip")
	good := strings.TrimSpace(nginxLog(burstTraffic()[:2]))
	lines := []string{
		good,
		`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "\x16\x03\x01" 400 0 "-" "-"`, // TLS to a plain port
		`not a log line`,
		`192.0.2.1 - - [yesterday] "GET / HTTP/1.1" 200 1 "-" "-"`,
		`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 2x0 1 "-" "-"`,
		`192.0.2.1 - - [30/Nov/2026:10:00:00 +0000] "GET /ok HTTP/1.1`,
		``,
		good,
	}
	rep := run(t, strings.Join(lines, "\n")+"\n", cfg, nil, RunOptions{Format: FormatNginx})
	if rep.Requests != 4 || rep.Malformed != 5 || rep.Lines != 10 {
		t.Fatalf("%d requests, %d malformed, %d lines; want 4, 5, 10 (%v)", rep.Requests, rep.Malformed, rep.Lines, rep.MalformedBy)
	}
	if rep.MalformedBy["nginx: request"] != 1 || rep.MalformedBy["nginx: time"] != 1 {
		t.Errorf("reasons %v", rep.MalformedBy)
	}
	if len(rep.Examples) != 5 || !strings.HasPrefix(rep.Examples[0], "line 3: nginx: request") {
		t.Errorf("examples %q", rep.Examples)
	}
	var out bytes.Buffer
	rep.WriteText(&out)
	if !strings.Contains(out.String(), "5 malformed lines") {
		t.Errorf("text report does not count malformed lines:\n%s", out.String())
	}
}

// Floodgate's own denial log lines carry no request to replay: they are
// refused with a reason that says so.
func TestFloodgateDenialLineRefused(t *testing.T) {
	_, err := ParseJSON([]byte(`{"time":"2026-11-30T10:00:00Z","level":"INFO","msg":"request denied","front":"proxy","policy":"api","key":"k:0123456789ab","source":"memory","retry_after":"1s","shadow":false,"suppressed":0}`))
	if err == nil || !strings.Contains(err.Error(), "floodgate proxy log line") {
		t.Fatalf("err %v; want a floodgate log line refused", err)
	}
	text := `time=2026-11-30T10:00:00.000Z level=INFO msg="request denied" front=proxy policy=api key=k:0123456789ab source=memory retry_after=1s shadow=false suppressed=0`
	if _, err := Parse(FormatNginx, []byte(text), Options{}); err == nil || !strings.Contains(err.Error(), "a floodgate log line") {
		t.Fatalf("text line: %v; want a floodgate log line refused", err)
	}
}

// Envoy lines: the peer is the last X-Forwarded-For address, the rest
// stays the header, so the trusted proxies of the configuration resolve
// the client; a line without it needs -peer.
func TestEnvoyPeer(t *testing.T) {
	line := `[2026-11-30T10:00:00.123Z] "GET /api/a HTTP/2" 200 - 0 10 1 1 "198.51.100.7, 10.1.1.1" "ua" "id" "api.example.com" "10.0.0.9:80"`
	r, err := ParseEnvoy([]byte(line), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Peer != "10.1.1.1" || r.Header.Get("X-Forwarded-For") != "198.51.100.7" || r.Host != "api.example.com" || r.Status != 200 ||
		!r.Time.Equal(time.Date(2026, 11, 30, 10, 0, 0, 123e6, time.UTC)) {
		t.Fatalf("parsed %+v", r)
	}
	noXFF := `[2026-11-30T10:00:00.123Z] "GET /api/a HTTP/2" 0 UC 0 0 1 - "-" "ua" "id" "api.example.com" "-" "k-9"`
	r, err = ParseEnvoy([]byte(noXFF), Options{ExtraHeaders: []string{"X-Api-Key"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Peer != "" || r.Status != 0 || r.Header.Get("X-Api-Key") != "k-9" {
		t.Fatalf("parsed %+v", r)
	}
	cfg := configFile(t, "c.yaml", "5/min", "ip")
	rep := run(t, noXFF+"\n", cfg, nil, RunOptions{})
	if rep.Malformed != 1 || rep.Requests != 0 {
		t.Errorf("no peer: %d malformed, %d requests; want 1, 0", rep.Malformed, rep.Requests)
	}
	rep = run(t, noXFF+"\n", cfg, nil, RunOptions{Peer: "192.0.2.50"})
	if rep.Requests != 1 {
		t.Errorf("with a peer: %d requests (%v); want 1", rep.Requests, rep.Examples)
	}
}

// A line logged before one already decided is decided at the later time
// (the engine's clock never runs back), and the report says how many.
func TestReorderedLines(t *testing.T) {
	cfg := configFile(t, "c.yaml", "1/min", "ip")
	reqs := []logReq{
		{time.Minute, "192.0.2.1", "GET", "/api/a", 200},
		{0, "192.0.2.1", "GET", "/api/a", 200}, // older: decided at 1m, denied
	}
	rep := run(t, nginxLog(reqs), cfg, nil, RunOptions{})
	if rep.Reordered != 1 || row(t, rep.Routes, "api").Denied != 1 {
		t.Errorf("reordered %d, api %+v; want 1 reordered, 1 denied", rep.Reordered, row(t, rep.Routes, "api").Counts)
	}
}

// A configuration without a proxy cannot be replayed: the error says why.
func TestNoProxy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("policies:\n  a:\n    rate: 1/s\ncheck:\n  listen: 127.0.0.1:0\n"), 0o600)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), strings.NewReader(""), cfg, nil, RunOptions{}); err == nil || !strings.Contains(err.Error(), "no proxy section") {
		t.Fatalf("err %v; want no proxy section", err)
	}
}

// A line longer than the bound is one malformed line, and reading goes on.
func TestLongLine(t *testing.T) {
	cfg := configFile(t, "c.yaml", "5/min", "ip")
	log := strings.Repeat("x", maxLine+10) + "\n" + nginxLog(burstTraffic()[:1])
	rep := run(t, log, cfg, nil, RunOptions{Format: FormatNginx})
	if rep.Malformed != 1 || rep.Requests != 1 || rep.Lines != 2 {
		t.Fatalf("%d malformed, %d requests, %d lines; want 1, 1, 2", rep.Malformed, rep.Requests, rep.Lines)
	}
}

// A route with two limits: the global limit denies first, so the per-client
// policy behind it is unchecked for those requests, and a shadow route's
// denials are counted as denials of a shadow route.
func TestTwoLimitsAndShadow(t *testing.T) {
	yaml := `policies:
  global:
    rate: 4/min
  per_ip:
    rate: 100/min
  beta:
    rate: 1/min
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  routes:
    - name: beta
      shadow: true
      match: {path_prefix: ["/beta"]}
      limits:
        - {policy: beta, key: ip}
    - name: api
      limits:
        - {policy: global, key: global}
        - {policy: per_ip, key: ip}
`
	path := filepath.Join(t.TempDir(), "two.yaml")
	os.WriteFile(path, []byte(yaml), 0o600)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []logReq
	for i := range 10 {
		reqs = append(reqs, logReq{time.Duration(i) * time.Millisecond, fmt.Sprintf("192.0.2.%d", i+1), "GET", "/api", 200})
	}
	for i := range 3 {
		reqs = append(reqs, logReq{time.Second + time.Duration(i)*time.Millisecond, "192.0.2.1", "GET", "/beta/x", 200})
	}
	rep := run(t, nginxLog(reqs), cfg, nil, RunOptions{})
	if g := row(t, rep.Policies, "global"); g.Requests != 10 || g.Allowed != 4 || g.Denied != 6 {
		t.Errorf("global %+v; want 10 requests, 4 allowed, 6 denied", g.Counts)
	}
	if p := row(t, rep.Policies, "per_ip"); p.Requests != 10 || p.Allowed != 4 || p.Unchecked != 6 || p.Denied != 0 {
		t.Errorf("per_ip %+v; want 10 requests, 4 allowed, 6 unchecked", p.Counts)
	}
	if b := row(t, rep.Routes, "beta"); !b.Shadow || b.Requests != 3 || b.Denied != 2 {
		t.Errorf("beta %+v; want a shadow route with 2 of 3 denied", b)
	}
	var out bytes.Buffer
	rep.WriteText(&out)
	if !strings.Contains(out.String(), "beta (shadow)") {
		t.Errorf("text report does not mark the shadow route:\n%s", out.String())
	}
}

// A path the proxy refuses before any route (a NUL, invalid UTF-8) is its
// own row, counted as a request but neither allowed nor denied by a limit,
// and never a flip.
func TestBadPathsHaveTheirOwnRow(t *testing.T) {
	cand := configFile(t, "candidate.yaml", "1/min", "ip")
	cur := configFile(t, "current.yaml", "100/min", "ip")
	traffic := []logReq{
		{0, "192.0.2.1", "GET", "/api/a", 200},
		{time.Second, "192.0.2.1", "GET", "/api/login%00", 400},
		{2 * time.Second, "192.0.2.1", "GET", "/api/%C0%AF", 400},
	}
	rep := run(t, jsonLog(traffic), cand, cur, RunOptions{})
	bad := row(t, rep.Routes, BadPath)
	if bad.Requests != 2 || bad.Allowed != 0 || bad.Denied != 0 {
		t.Errorf("bad paths %+v; want 2 requests, neither allowed nor denied", bad.Counts)
	}
	if rep.Flipped.Denied != 0 || rep.Flipped.Allowed != 0 {
		t.Errorf("flipped %+v; want none", rep.Flipped)
	}
}
