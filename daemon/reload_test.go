package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/internal/yamlpos"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fieldPaths lists the YAML path of every field of the configuration, at
// the granularity a reload compares them (changedFields): every section
// itself (it may be added or removed) and every field in it.
func fieldPaths(t reflect.Type, path string, out *[]string) {
	text := func(t reflect.Type) bool {
		return reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
		if t.Kind() == reflect.Struct && !text(t) {
			*out = append(*out, path)
		}
	}
	if t.Kind() == reflect.Struct && !text(t) {
		for _, f := range yamlpos.Fields(t) {
			fieldPaths(t.FieldByIndex(f.Index).Type, yamlpos.JoinPath(path, f.Name), out)
		}
		return
	}
	if path != "" && !slices.Contains(*out, path) {
		*out = append(*out, path)
	}
}

// reloadEnv is one daemon to reload, with what its checks talk to.
type reloadEnv struct {
	t    *testing.T
	d    *Daemon
	dir  string
	up   [2]string // two upstreams; each answers its own name
	logs *testkit.Buffer
}

func (e *reloadEnv) proxyURL(path string) string {
	return "http://" + e.d.Addrs().Proxy.String() + path
}

// get sends a GET through the proxy with the header pairs given.
func (e *reloadEnv) get(path string, hdr ...string) (*http.Response, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.proxyURL(path), nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.do(req)
}

func (e *reloadEnv) do(req *http.Request) (*http.Response, string) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// statuses sends n GETs and returns their status codes.
func (e *reloadEnv) statuses(n int, path string, hdr ...string) []int {
	var out []int
	for range n {
		r, _ := e.get(path, hdr...)
		out = append(out, r.StatusCode)
	}
	return out
}

// has reports whether the configuration in service has the section at
// path (a nil section is absent).
func (e *reloadEnv) has(path string) bool {
	v, ok := fieldAt(reflect.ValueOf(e.d.Config()).Elem(), path, false)
	return ok && !(v.Kind() == reflect.Pointer && v.IsNil())
}

// fieldAt finds the field at the YAML path below v. Sections on the way
// that are absent are made when create is set; otherwise fieldAt reports
// false for them.
func fieldAt(v reflect.Value, path string, create bool) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !create {
					return v, false
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		var next reflect.Value
		for _, f := range yamlpos.Fields(v.Type()) {
			if f.Name == name {
				next = v.FieldByIndex(f.Index)
			}
		}
		if !next.IsValid() {
			return v, false
		}
		v = next
	}
	return v, true
}

func (e *reloadEnv) limiter(name string) *floodgate.LimitSet {
	if d, ok := floodgate.As[floodgate.Describer](e.d.cur.Load().limiters[name]); ok {
		return d.LimitsFor("k")
	}
	e.t.Fatalf("no limits for policy %q", name)
	return nil
}

const reloadBase = `
policies:
  api: {rate: 100/min}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes: [{name: all, limits: [{policy: api, key: ip}]}]
  bounds: {header_timeout: 1h}
check: {listen: 127.0.0.1:0, token: c1, bounds: {header_timeout: 1h}}
envoy: {listen: 127.0.0.1:0, ratelimit_config: [%q], bounds: {header_timeout: 1h}}
postgres:
  listen: 127.0.0.1:0
  upstream: 127.0.0.1:1
  bounds: {header_timeout: 1h}
  rate_limit:
    global: {rate: 100/min}
    per_user: {rate: 100/min}
    per_ip: {rate: 100/min}
  connections: {per_user: {rate: 100/min}, per_ip: {rate: 100/min}}
admin: {listen: 127.0.0.1:0, token: a1, bounds: {header_timeout: 1h}}
log: {level: info}
`

// A reloadCase changes fields of the configuration and checks that what
// serves afterwards is what the new value says.
type reloadCase struct {
	fields []string // the paths it covers
	change func(e *reloadEnv, c *config.Config)
	check  func(e *reloadEnv)
}

func reloadCases() []reloadCase {
	header := func(field string, set func(c *config.Config), name string, present bool) reloadCase {
		return reloadCase{[]string{"proxy.headers." + field}, func(_ *reloadEnv, c *config.Config) { set(c) }, func(e *reloadEnv) {
			r, _ := e.get("/")
			if (r.Header.Get(name) != "") != present {
				e.t.Errorf("%s after the reload: %q, want present=%v", name, r.Header.Get(name), present)
			}
		}}
	}
	limits := func(path, policy string, set func(c *config.Config, l config.LimitsSpec)) reloadCase {
		return reloadCase{[]string{path}, func(_ *reloadEnv, c *config.Config) {
			set(c, config.LimitsSpec{LimitSpec: config.LimitSpec{Rate: config.Rate{Count: 7, Period: time.Second}}})
		}, func(e *reloadEnv) {
			if l := e.limiter(policy).Limit(0); l.Rate != 7 || l.Period != time.Second {
				e.t.Errorf("policy %s after the reload: %v, want 7/s", policy, l)
			}
		}}
	}
	// A listener's connection bounds, lowered by a reload, refuse the
	// next connection over them: 4 in all, 2 per client (the load from
	// 127.0.0.1 during the reload keeps within them). The base's
	// header_timeout of an hour keeps the admitted connections, which send
	// nothing, open however slow the machine.
	conns := func(listener string) reloadCase {
		return reloadCase{[]string{listener + ".bounds.max_connections", listener + ".bounds.max_connections_per_client"}, func(_ *reloadEnv, c *config.Config) {
			v, _ := fieldAt(reflect.ValueOf(c).Elem(), listener+".bounds", false)
			b := v.Addr().Interface().(*config.Bounds)
			b.MaxConnections, b.MaxConnectionsPerClient = 4, 2
		}, func(e *reloadEnv) {
			http.DefaultClient.CloseIdleConnections()
			testkit.Eventually(e.t, 10*time.Second, "no connection open on "+listener, func() bool { return e.d.run.open(listener) == 0 })
			refused := func(why string) float64 {
				return testutil.ToFloat64(e.d.connsRefused.WithLabelValues(listener, why))
			}
			addr := e.d.run.addr(listener).String()
			dial := func(from string) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					return // refused before the dial returned
				}
				e.t.Cleanup(func() { c.Close() })
			}
			dial("127.0.0.2")
			dial("127.0.0.2")
			testkit.Eventually(e.t, 10*time.Second, "a client's two connections admitted", func() bool { return e.d.run.open(listener) == 2 })
			dial("127.0.0.2")
			testkit.Eventually(e.t, 10*time.Second, "a client's third connection refused", func() bool { return refused("per_client") == 1 })
			dial("127.0.0.3")
			dial("127.0.0.4")
			testkit.Eventually(e.t, 10*time.Second, "other clients admitted", func() bool { return e.d.run.open(listener) == 4 })
			dial("127.0.0.5")
			testkit.Eventually(e.t, 10*time.Second, "a fifth connection refused", func() bool { return refused("listener") == 1 })
		}}
	}
	return []reloadCase{
		conns("proxy"), conns("check"), conns("envoy"), conns("postgres"), conns("admin"),
		{[]string{"policies"}, func(_ *reloadEnv, c *config.Config) {
			p := c.Policies["api"]
			p.Rate = config.Rate{Count: 2, Period: time.Minute}
			c.Policies["api"] = p
		}, func(e *reloadEnv) {
			if got := e.statuses(3, "/"); got[2] != 429 {
				e.t.Errorf("api at 2/min after the reload: %v", got)
			}
		}},
		{[]string{"proxy.upstream"}, func(e *reloadEnv, c *config.Config) { c.Proxy.Upstream = e.up[1] }, func(e *reloadEnv) {
			if _, body := e.get("/"); body != "up1" {
				e.t.Errorf("after moving the upstream the proxy reached %q", body)
			}
		}},
		{[]string{"proxy.client_ip.trusted_proxies", "proxy.client_ip.header"}, func(_ *reloadEnv, c *config.Config) {
			c.Proxy.ClientIP.TrustedProxies = []string{"127.0.0.1"}
			c.Proxy.ClientIP.Header = "X-Real-IP"
			p := c.Policies["api"]
			p.Rate = config.Rate{Count: 1, Period: time.Minute}
			c.Policies["api"] = p
		}, func(e *reloadEnv) {
			// Two clients behind the now trusted proxy: one unit each.
			a := e.statuses(2, "/", "X-Real-IP", "192.0.2.1")
			b := e.statuses(1, "/", "X-Real-IP", "192.0.2.2")
			if a[0] != 200 || a[1] != 429 || b[0] != 200 {
				e.t.Errorf("clients behind a trusted proxy: %v %v", a, b)
			}
		}},
		{[]string{"proxy.client_ip.trusted_hops", "proxy.client_ip.ipv4_prefix", "proxy.client_ip.ipv6_prefix"}, func(_ *reloadEnv, c *config.Config) {
			c.Proxy.ClientIP.TrustedHops = 1
			c.Proxy.ClientIP.IPv4Prefix = 24
			c.Proxy.ClientIP.IPv6Prefix = 48
			p := c.Policies["api"]
			p.Rate = config.Rate{Count: 1, Period: time.Minute}
			c.Policies["api"] = p
		}, func(e *reloadEnv) {
			// One hop trusted by position, clients grouped by /24.
			a := e.statuses(1, "/", "X-Forwarded-For", "192.0.2.1")
			b := e.statuses(1, "/", "X-Forwarded-For", "192.0.2.99")
			c := e.statuses(1, "/", "X-Forwarded-For", "198.51.100.1")
			if a[0] != 200 || b[0] != 429 || c[0] != 200 {
				e.t.Errorf("clients grouped by /24 through one trusted hop: %v %v %v", a, b, c)
			}
		}},
		{[]string{"proxy.user_trusted_from"}, func(_ *reloadEnv, c *config.Config) {
			c.Proxy.UserTrustedFrom = []string{"127.0.0.0/8"}
			c.Proxy.Routes[0].Limits[0].Key = config.Key{{Source: config.KeyUser, Header: "X-User"}}
			p := c.Policies["api"]
			p.Rate = config.Rate{Count: 1, Period: time.Minute}
			c.Policies["api"] = p
		}, func(e *reloadEnv) {
			a := e.statuses(2, "/", "X-User", "alice")
			b := e.statuses(1, "/", "X-User", "bob")
			if a[0] != 200 || a[1] != 429 || b[0] != 200 {
				e.t.Errorf("users from a trusted gateway: %v %v", a, b)
			}
		}},
		header("disable_x_ratelimit", func(c *config.Config) { c.Proxy.Headers.DisableXRateLimit = true }, "X-Ratelimit-Limit", false),
		header("disable_ratelimit", func(c *config.Config) { c.Proxy.Headers.DisableRateLimit = true }, "Ratelimit-Policy", false),
		header("source", func(c *config.Config) { c.Proxy.Headers.Source = true }, "X-Ratelimit-Source", true),
		{[]string{"proxy.headers.unix_reset"}, func(_ *reloadEnv, c *config.Config) { c.Proxy.Headers.UnixReset = true }, func(e *reloadEnv) {
			r, _ := e.get("/")
			if v := r.Header.Get("X-Ratelimit-Reset"); len(v) < 10 {
				e.t.Errorf("X-RateLimit-Reset %q is no Unix time", v)
			}
		}},
		{[]string{"proxy.headers.disable_retry_after", "proxy.body"}, func(_ *reloadEnv, c *config.Config) {
			c.Proxy.Headers.DisableRetryAfter = true
			c.Proxy.Body = 1 // json
			p := c.Policies["api"]
			p.Rate = config.Rate{Count: 1, Period: time.Minute}
			c.Policies["api"] = p
		}, func(e *reloadEnv) {
			e.get("/")
			r, body := e.get("/")
			if r.StatusCode != 429 || r.Header.Get("Retry-After") != "" || r.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, `"error"`) {
				e.t.Errorf("429 after the reload: %d %v %q", r.StatusCode, r.Header, body)
			}
		}},
		{[]string{"proxy.routes"}, func(_ *reloadEnv, c *config.Config) {
			c.Proxy.Routes = append([]config.Route{{Name: "free", Match: matchPrefix("/free")}}, c.Proxy.Routes...)
		}, func(e *reloadEnv) {
			if r, _ := e.get("/free/x"); r.Header.Get("X-Ratelimit-Limit") != "" {
				e.t.Error("a route added by the reload does not serve")
			}
		}},
		{[]string{"proxy.routes"}, func(_ *reloadEnv, c *config.Config) {
			// A route's concurrency section (limit, queue, max_wait, key,
			// adaptive) is part of the route: a reload applies it.
			c.Proxy.Routes = append([]config.Route{{Name: "bounded", Match: matchPrefix("/bounded"),
				Concurrency: &config.RouteConcurrency{Queue: 4, MaxWait: config.Duration(time.Minute), Key: config.Key{{Source: config.KeyIP}},
					Adaptive: &config.AdaptiveConcurrency{Algorithm: config.AdaptiveAIMD, InitialLimit: 5, MinLimit: 5, MaxLimit: 9}}}}, c.Proxy.Routes...)
		}, func(e *reloadEnv) {
			if r, _ := e.get("/bounded/x"); r.StatusCode != 200 || r.Header.Get("X-Concurrency-Limit") != "5" || r.Header.Get("X-Concurrency-Remaining") != "4" {
				e.t.Errorf("a concurrency section added by the reload: %d %v", r.StatusCode, r.Header)
			}
		}},
		{[]string{"check.token", "check.token_file"}, func(e *reloadEnv, c *config.Config) {
			file := filepath.Join(e.dir, "check.token")
			os.WriteFile(file, []byte("c2\n"), 0o600)
			c.Check.Token, c.Check.TokenFile = "c2", file
		}, func(e *reloadEnv) {
			post := func(token string) int {
				req, _ := http.NewRequest("POST", "http://"+e.d.Addrs().Check.String()+"/v1/check", strings.NewReader(`{"policy":"api","key":"k"}`))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				r, _ := e.do(req)
				return r.StatusCode
			}
			if o, n := post("c1"), post("c2"); o != 401 || n != 200 {
				e.t.Errorf("the check API after rotating its token: old %d, new %d", o, n)
			}
		}},
		{[]string{"envoy.token", "envoy.token_file"}, func(e *reloadEnv, c *config.Config) {
			file := filepath.Join(e.dir, "envoy.token")
			os.WriteFile(file, []byte("e2\n"), 0o600)
			c.Envoy.Token, c.Envoy.TokenFile = "e2", file
		}, func(e *reloadEnv) {
			conn, err := grpc.NewClient(e.d.Addrs().Envoy.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				e.t.Fatal(err)
			}
			defer conn.Close()
			call := func(token string) codes.Code {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if token != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
				}
				_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
				return status.Code(err)
			}
			if o, n := call(""), call("e2"); o != codes.Unauthenticated || n != codes.OK {
				e.t.Errorf("the Envoy listener after a token was set: without %v, with %v", o, n)
			}
		}},
		{[]string{"admin.token", "admin.token_file"}, func(e *reloadEnv, c *config.Config) {
			file := filepath.Join(e.dir, "admin.token")
			os.WriteFile(file, []byte("a2\n"), 0o600)
			c.Admin.Token, c.Admin.TokenFile = "a2", file
		}, func(e *reloadEnv) {
			get := func(token string) int {
				req, _ := http.NewRequest("GET", "http://"+e.d.Addrs().Admin.String()+"/v1/config", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				r, _ := e.do(req)
				return r.StatusCode
			}
			if o, n := get("a1"), get("a2"); o != 401 || n != 200 {
				e.t.Errorf("the admin listener after rotating its token: old %d, new %d", o, n)
			}
		}},
		{[]string{"envoy.ratelimit_config", "envoy.algorithm"}, func(e *reloadEnv, c *config.Config) {
			file := filepath.Join(e.dir, "rl2.yaml")
			os.WriteFile(file, []byte("domain: edge\ndescriptors: [{key: k2, rate_limit: {unit: second, requests_per_unit: 3}}]\n"), 0o644)
			c2 := reparse(e.t, c, func(s string) string {
				s = strings.Replace(s, filepath.Join(e.dir, "rl.yaml"), file, 1)
				return strings.Replace(s, "algorithm: fixed_window", "algorithm: gcra", 1)
			})
			*c = *c2
		}, func(e *reloadEnv) {
			l := e.limiter("edge.k2").Limit(0)
			if l.Rate != 3 || l.Algorithm != floodgate.GCRA {
				e.t.Errorf("the Envoy rule after the reload: %v", l)
			}
			if _, ok := e.d.cur.Load().limiters["edge.k"]; ok {
				e.t.Error("the rule the reload removed still has a limiter")
			}
		}},
		limits("postgres.rate_limit.global", config.PolicyPostgresGlobal, func(c *config.Config, l config.LimitsSpec) {
			c.Postgres.RateLimit.Global.LimitsSpec = l
		}),
		limits("postgres.rate_limit.per_user", config.PolicyPostgresPerUser, func(c *config.Config, l config.LimitsSpec) {
			c.Postgres.RateLimit.PerUser.LimitsSpec = l
		}),
		limits("postgres.rate_limit.per_ip", config.PolicyPostgresPerIP, func(c *config.Config, l config.LimitsSpec) {
			c.Postgres.RateLimit.PerIP.LimitsSpec = l
		}),
		limits("postgres.connections.per_user", config.PolicyPostgresConnPerUser, func(c *config.Config, l config.LimitsSpec) {
			*c.Postgres.Connections.PerUser = l
		}),
		limits("postgres.connections.per_ip", config.PolicyPostgresConnPerIP, func(c *config.Config, l config.LimitsSpec) {
			*c.Postgres.Connections.PerIP = l
		}),
		{[]string{"postgres.concurrency"}, func(_ *reloadEnv, c *config.Config) {
			c.Postgres.Concurrency = &config.PostgresConcurrency{PerUser: 2, MaxWait: config.Duration(time.Second)}
		}, func(e *reloadEnv) {
			if lim := e.d.pg.Limits().ConcurrentQueries; lim == nil || lim.Limit() != 2 {
				e.t.Errorf("the PostgreSQL proxy's concurrent-query limit after the reload: %v, want 2 per user", lim)
			}
		}},
		{[]string{"log.level"}, func(_ *reloadEnv, c *config.Config) { c.Log.Level = "debug" }, func(e *reloadEnv) {
			if !e.d.log.Enabled(context.Background(), slog.LevelDebug) {
				e.t.Error("debug lines are still off after the reload")
			}
		}},
		{[]string{"shutdown_timeout", "shutdown_delay"}, func(_ *reloadEnv, c *config.Config) {
			c.ShutdownTimeout, c.ShutdownDelay = config.Duration(3*time.Second), config.Duration(time.Second)
		}, func(e *reloadEnv) {
			if e.d.run.delay.Load() != int64(time.Second) || e.d.Config().ShutdownTimeout.D() != 3*time.Second {
				e.t.Error("the shutdown settings of the reload are not in service")
			}
		}},
	}
}

func matchPrefix(p string) httpmatch.Match { return httpmatch.Match{PathPrefix: []string{p}} }

// reparse renders c as YAML, edits it and parses it again, for changes that
// only make sense in the file (files the configuration reads).
func reparse(t *testing.T, c *config.Config, edit func(string) string) *config.Config {
	t.Helper()
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	n, err := config.Parse(c.File, []byte(edit(string(b))))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReloadAppliesOrRefusesEveryField: for every field of the
// configuration, a reload that changes it, under load, either serves the
// new value (checked by what the daemon then does) or is refused naming the
// field while the old configuration keeps serving. A field with no case
// here fails the test, so a new field cannot be silently ignored by reloads.
func TestReloadAppliesOrRefusesEveryField(t *testing.T) {
	var all []string
	fieldPaths(reflect.TypeFor[config.Config](), "", &all)
	cases := reloadCases()
	covered := map[string]bool{}
	for _, c := range cases {
		for _, f := range c.fields {
			covered[f] = true
		}
	}
	// The cases for whole sections or lists cover the fields inside them.
	coveredBy := func(p string) bool {
		for f := range covered {
			if p == f || strings.HasPrefix(p, f+".") {
				return true
			}
		}
		return false
	}
	var refused []string
	for _, p := range all {
		switch {
		case reloadTestedElsewhere[p] != "":
		case reloadable(p) && !coveredBy(p):
			t.Errorf("%s is reloadable but no case checks that a reload applies it", p)
		case !reloadable(p):
			refused = append(refused, p)
		}
	}

	up := [2]string{}
	for i := range up {
		name := fmt.Sprintf("up%d", i)
		srv := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		up[i] = srv
	}
	start := func(t *testing.T) *reloadEnv {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: edge\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 10}}]\n"), 0o644)
		cfg, err := config.Parse(filepath.Join(dir, "floodgate.yaml"), []byte(fmt.Sprintf(reloadBase, up[0], filepath.Join(dir, "rl.yaml"))))
		if err != nil {
			t.Fatal(err)
		}
		logs := &testkit.Buffer{}
		d, err := New(cfg, Options{LogOutput: logs})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d.Shutdown(ctx)
		})
		return &reloadEnv{t: t, d: d, dir: dir, up: up, logs: logs}
	}
	// load sends requests through the proxy while fn runs and reports how
	// many failed (a transport error or a 5xx).
	load := func(e *reloadEnv, fn func()) int {
		var failed atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := http.Get(e.proxyURL("/load"))
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 500 {
						failed.Add(1)
					}
				}
			})
		}
		fn()
		close(stop)
		wg.Wait()
		return int(failed.Load())
	}

	for _, c := range cases {
		t.Run(strings.Join(c.fields, ","), func(t *testing.T) {
			e := start(t)
			next := reparse(t, e.d.Config(), func(s string) string { return s })
			c.change(e, next)
			var err error
			if failed := load(e, func() { err = e.d.Apply(next) }); failed > 0 {
				t.Errorf("%d requests failed during the reload", failed)
			}
			if err != nil {
				t.Fatalf("reload refused: %v", err)
			}
			c.check(e)
		})
	}

	// Every other field: the reload is refused naming it, and the old
	// configuration keeps serving.
	e := start(t)
	for _, p := range refused {
		next := reparse(t, e.d.Config(), func(s string) string { return s })
		if !setDifferent(next, p) {
			t.Errorf("%s: the test cannot change this field; teach setDifferent its type", p)
			continue
		}
		err := e.d.Apply(next)
		// A field of a section the base leaves out is changed by adding
		// the section, which is what the refusal names.
		want := p
		for i := range p {
			if p[i] == '.' && !e.has(p[:i]) {
				want = p[:i]
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), want+": changed, but a reload cannot apply it") {
			t.Errorf("%s changed: reload error %v, want it refused naming %s", p, err, want)
		}
		if e.d.Config() == next {
			t.Errorf("%s: the refused configuration is in service", p)
		}
	}
	if r, _ := e.get("/"); r.StatusCode != 200 {
		t.Errorf("after the refused reloads the proxy answers %d", r.StatusCode)
	}
}

// setDifferent sets the field at path of c to a value other than its own
// (creating the section if it is absent, or removing a section), and
// reports whether it knew how.
func setDifferent(c *config.Config, path string) bool {
	v, ok := fieldAt(reflect.ValueOf(c).Elem(), path, true)
	if !ok {
		return false
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			v.SetZero()
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 7)
	case reflect.Uint8:
		v.SetUint(v.Uint() ^ 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 0.5)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Map:
		if v.Len() > 0 {
			v.SetZero()
		} else {
			m := reflect.MakeMap(v.Type())
			m.SetMapIndex(reflect.ValueOf("x").Convert(v.Type().Key()), reflect.Zero(v.Type().Elem()))
			v.Set(m)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[config.Rate]() {
			v.Set(reflect.ValueOf(config.Rate{Count: 3, Period: time.Second}))
			return true
		}
		return false
	default:
		return false
	}
	return true
}

// newUpstream serves h on loopback until t ends.
func newUpstream(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// The reloadable fields whose checks need a base of their own, and the
// tests that check them.
var reloadTestedElsewhere = map[string]string{
	"proxy.tls.cert":              "TestReloadProxyTLS",
	"proxy.tls.key":               "TestReloadProxyTLS",
	"proxy.tls.client_ca":         "TestReloadProxyTLS",
	"storage.redis.username":      "TestReloadRedisPassword",
	"storage.redis.password":      "TestReloadRedisPassword",
	"storage.redis.password_file": "TestReloadRedisPassword",
	"envoy.lease":                 "TestEnvoyLeaseReload",
	"envoy.lease_max":             "TestEnvoyLeaseReload",
}

// TestReloadProxyTLS: a reload that points the proxy at other certificate
// files, or adds client CAs, is what the next handshake gets.
func TestReloadProxyTLS(t *testing.T) {
	dir := t.TempDir()
	c1 := testkit.WriteCert(t, dir, "one", 1)
	c2 := testkit.WriteCert(t, dir, "two", 2)
	client := testkit.WriteCert(t, dir, "client", 3)
	conf := func(cert testkit.Cert, ca string) *config.Config {
		extra := ""
		if ca != "" {
			extra = ", client_ca: " + ca
		}
		return mustParse(t, fmt.Sprintf("proxy: {listen: 127.0.0.1:0, upstream: demo, tls: {cert: %s, key: %s%s}}\nadmin: {listen: \"\"}\n", cert.CertFile, cert.KeyFile, extra))
	}
	d, err := New(conf(c1, ""), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	handshake := func(withClient bool) (int64, error) {
		roots := x509.NewCertPool()
		roots.AddCert(c1.Cert)
		roots.AddCert(c2.Cert)
		tc := &tls.Config{RootCAs: roots, ServerName: "localhost"}
		if withClient {
			pair, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		conn, err := tls.Dial("tcp", d.Addrs().Proxy.String(), tc)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		// TLS 1.3 reports a refused client certificate on the first read.
		conn.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"))
		if _, err := conn.Read(make([]byte, 1)); err != nil {
			return 0, err
		}
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
	}
	if s, err := handshake(false); err != nil || s != 1 {
		t.Fatalf("first certificate: serial %d, %v", s, err)
	}
	if err := d.Apply(conf(c2, "")); err != nil {
		t.Fatal(err)
	}
	if s, err := handshake(false); err != nil || s != 2 {
		t.Fatalf("after moving cert and key: serial %d, %v", s, err)
	}
	if err := d.Apply(conf(c2, client.CertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(false); err == nil {
		t.Error("after adding client_ca, a client without a certificate got through")
	}
	if s, err := handshake(true); err != nil || s != 2 {
		t.Errorf("after adding client_ca, a client with a certificate: serial %d, %v", s, err)
	}
}

// TestReloadRedisPassword: a rotated password_file, reloaded, is what new
// connections to Redis authenticate with; once the old connections are
// gone, decisions still come from Redis.
func TestReloadRedisPassword(t *testing.T) {
	srv := testkit.Redis(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "redis.password")
	os.WriteFile(secret, []byte("first\n"), 0o600)
	if _, err := srv.Do("CONFIG", "SET", "requirepass", "first"); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "first"})
	defer admin.Close()
	file := filepath.Join(dir, "floodgate.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q], password_file: %s}
  failure: {mode: fail_closed}
policies: {api: {rate: 1000/s}}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`, srv.Addr, secret)), 0o644)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	source := func() string {
		resp, err := http.Post("http://"+d.Addrs().Check.String()+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"k"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testkit.Eventually(t, 20*time.Second, "a decision by redis", func() bool { return strings.Contains(source(), `"source":"redis"`) })

	// Rotate: Redis takes the new password, the file holds it, a reload
	// reads it; then every connection made with the old one is cut.
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "requirepass", "second").Err(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(secret, []byte("second\n"), 0o600)
	next, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(next); err != nil {
		t.Fatalf("the rotated password was refused: %v", err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "a decision by redis over new connections", func() bool { return strings.Contains(source(), `"source":"redis"`) })
}
