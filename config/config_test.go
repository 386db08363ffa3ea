package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
)

// exampleEnv sets the variables the example files expand.
func exampleEnv(t *testing.T) {
	t.Helper()
	t.Setenv("REDIS_PASSWORD", "example-redis-password")
	t.Setenv("ADMIN_TOKEN", "example-admin-token")
}

func TestDefault(t *testing.T) {
	c := Default()
	if c.Storage.Engine != EngineMemory {
		t.Errorf("engine = %q, want memory", c.Storage.Engine)
	}
	if c.Proxy == nil || c.Proxy.Listen != ":8080" || c.Proxy.Upstream != DemoUpstream {
		t.Fatalf("proxy = %+v, want :8080 in front of demo", c.Proxy)
	}
	if c.Admin == nil || c.Admin.Listen != "127.0.0.1:9090" {
		t.Errorf("admin = %+v, want 127.0.0.1:9090", c.Admin)
	}
	ps, err := c.FloodgatePolicies()
	if err != nil {
		t.Fatal(err)
	}
	want := floodgate.Limit{Rate: 10, Period: time.Minute, Burst: 5}
	if p := ps["default"]; len(p.Limits) != 1 || p.Limits[0] != want {
		t.Errorf("default policy = %+v, want %v", p, want)
	}
	if k := c.Proxy.Routes[0].Limits[0].Key; k.String() != "ip" {
		t.Errorf("default key = %s, want ip", k)
	}
	if !strings.Contains(string(DefaultYAML()), "upstream: demo") {
		t.Error("DefaultYAML does not show the demo upstream")
	}
}

// TestExamples loads every shipped example: they are documentation, so
// they must stay valid.
func TestExamples(t *testing.T) {
	exampleEnv(t)
	files, _ := filepath.Glob("../examples/config/*.yaml")
	if len(files) < 5 {
		t.Fatalf("found %d example configs, want at least 5", len(files))
	}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := c.FloodgatePolicies(); err != nil {
			t.Errorf("%s: policies: %v", f, err)
		}
	}
}

func TestPhotoPlacesExamples(t *testing.T) {
	exampleEnv(t)
	prod, err := Load("../examples/config/photoplaces-production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if prod.Storage.Engine != EngineRedis || prod.Storage.Failure.Mode != failover.FailClosed || prod.Storage.Failure.Timeout.D() != 100*time.Millisecond {
		t.Errorf("production storage = %+v, want redis, fail_closed, 100ms", prod.Storage)
	}
	if prod.Storage.Redis.Password != "example-redis-password" {
		t.Errorf("password not taken from the environment: %q", prod.Storage.Redis.Password)
	}
	dev, err := Load("../examples/config/photoplaces-development.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if dev.Storage.Failure.Mode != failover.LocalFallback {
		t.Errorf("development failure mode = %q, want local_fallback", dev.Storage.Failure.Mode)
	}
	for _, c := range []*Config{prod, dev} {
		ps, err := c.FloodgatePolicies()
		if err != nil {
			t.Fatal(err)
		}
		for name, perMin := range map[string]int64{"auth": 10, "api_read": 60, "api_write": 10, "admin": 100} {
			if l := ps[name].Limits; len(l) != 1 || l[0].Rate != perMin || l[0].Period != time.Minute {
				t.Errorf("%s: %s = %v, want %d/min", c.File, name, l, perMin)
			}
		}
	}
}

// TestErrors checks that each mistake is reported at its field with a
// message saying what to do, and that all of them are reported at once.
func TestErrors(t *testing.T) {
	const head = "proxy: {upstream: demo, routes: [{limits: [{policy: api}]}]}\n"
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown field suggests", head + "policies:\n  api:\n    ratee: 100/min\n", []string{`f.yaml:4:5: policies.api.ratee: unknown field "ratee"; did you mean "rate"?`}},
		{"unknown top level", "polices: {}\n" + head, []string{`f.yaml:1:1: polices: unknown field "polices"; did you mean "policies"?`}},
		{"fraction", head + "policies:\n  api: {rate: 1.5/s}\n", []string{`f.yaml:3:15: policies.api.rate: rate "1.5/s" is not a whole number of units; write 3/2s instead`}},
		{"zero rate", head + "policies:\n  api: {rate: 0/s}\n", []string{"policies.api.rate", "at least 1"}},
		{"no period", head + "policies:\n  api: {rate: 100}\n", []string{"policies.api.rate", "no period"}},
		{"negative burst", head + "policies:\n  api: {rate: 10/s, burst: -1}\n", []string{"policies.api.burst", "must not be negative"}},
		{"window burst", head + "policies:\n  api: {rate: 10/s, burst: 20, algorithm: fixed_window}\n", []string{"policies.api.burst", "no separate burst"}},
		{"algorithm", head + "policies:\n  api: {rate: 10/s, algorithm: gcar}\n", []string{"policies.api.algorithm", `did you mean "gcra"?`}},
		{"zone", head + "policies:\n  api: {rate: 10/d, align: Mars/Olympus}\n", []string{"policies.api.align", "unknown time zone"}},
		{"align with gcra", head + "policies:\n  api: {rate: 10/d, align: UTC, algorithm: gcra}\n", []string{"policies.api.align", "fixed windows only"}},
		{"unknown policy", "policies:\n  api: {rate: 1/s}\nproxy:\n  upstream: demo\n  routes:\n    - limits:\n        - policy: apo\n", []string{`f.yaml:7:11: proxy.routes[0].limits[0].policy: no policy "apo"; did you mean "api"?`}},
		{"key source", head + "policies: {api: {rate: 1/s}}\nx: 1\n", []string{`x: unknown field "x"`}},
		{"bad key", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api, key: addr}]}]}\n", []string{"proxy.routes[0].limits[0].key", "unknown key source"}},
		{"user key untrusted", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api, key: user:X-User}]}]}\n", []string{"user_trusted_from"}},
		{"cidr", head + "policies: {api: {rate: 1/s}}\n" + "", nil},
		{"token count", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api, cost: tokens:prompt}]}]}\n", []string{"proxy.routes[0].limits[0].cost", "tokens:input, tokens:output or tokens:total"}},
		{"tokens count failed", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api, cost: tokens:output, count: failed}]}]}\n", []string{"proxy.routes[0].limits[0].count", "use all or successful"}},
		{"tokens unread", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api}], tokens: {estimate: 10}}]}\n", []string{"proxy.routes[0].tokens", "nothing reads it"}},
		{"tokens path", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api, cost: tokens}], tokens: {output: [usage..x]}}]}\n", []string{"proxy.routes[0].tokens", `output path "usage..x"`}},
		{"tokens weight", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api, cost: tokens}], tokens: {weights: {m: {input: -1}}}}]}\n", []string{"proxy.routes[0].tokens", `weight of model "m"`}},
		{"cidr host bits", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, client_ip: {trusted_proxies: [10.1.2.3/8]}}\n", []string{"proxy.client_ip.trusted_proxies[0]", "host bits are set; use 10.0.0.0/8"}},
		{"duration", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {dial_timeout: 5}, failure: {mode: fail_open}}\n", []string{"storage.redis.dial_timeout", `"5" has no unit`}},
		{"upstream url", "policies: {api: {rate: 1/s}}\nproxy: {upstream: 'localhost:3000'}\n", []string{"proxy.upstream"}},
		{"listen", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, listen: 8080}\n", []string{"proxy.listen", "host:port"}},
		{"failure required", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}}\n", []string{"storage.failure", "required"}},
		{"slow timeout below timeout", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open, timeout: 1s, slow_timeout: 200ms}}\n", []string{"storage.failure.slow_timeout", "shorter than timeout"}},
		{"failure rate above 1", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open, breaker: {failure_rate: 1.5}}}\n", []string{"storage.failure.breaker.failure_rate", "at most 1"}},
		{"failure rate 0", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open, breaker: {failure_rate: 0}}}\n", []string{"storage.failure.breaker.failure_rate", "above 0"}},
		{"min calls 0", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open, breaker: {min_calls: 0}}}\n", []string{"storage.failure.breaker.min_calls", "-1 to disable"}},
		{"window 0", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open, breaker: {window: 0s}}}\n", []string{"storage.failure.breaker.window", "must be positive"}},
		{"zero bound", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, bounds: {body_timeout: 0s}}\n", []string{"proxy.bounds.body_timeout", "must be positive"}},
		{"negative bound", head + "policies: {api: {rate: 1/s}}\ncheck: {bounds: {max_connections: -1}}\n", []string{"check.bounds.max_connections", "must be positive"}},
		{"per client over all", head + "policies: {api: {rate: 1/s}}\nadmin: {bounds: {max_connections: 10, max_connections_per_client: 20}}\n", []string{"admin.bounds.max_connections_per_client", "more than max_connections 10"}},
		{"tiny header", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, bounds: {max_header_bytes: 100}}\n", []string{"proxy.bounds.max_header_bytes", "at least 1024"}},
		{"bound not applied", "policies: {api: {rate: 1/s}}\npostgres: {upstream: 127.0.0.1:5432, bounds: {body_timeout: 5s}}\n", []string{"postgres.bounds.body_timeout", "does not apply body_timeout"}},
		{"pg concurrency zero", "policies: {api: {rate: 1/s}}\npostgres: {upstream: 127.0.0.1:5432, concurrency: {per_user: 0}}\n", []string{"postgres.concurrency.per_user", "positive"}},
		{"pg concurrency negative wait", "policies: {api: {rate: 1/s}}\npostgres: {upstream: 127.0.0.1:5432, concurrency: {per_user: 2, max_wait: -1s}}\n", []string{"postgres.concurrency.max_wait", "must not be negative"}},
		{"pg concurrency queue without wait", "policies: {api: {rate: 1/s}}\npostgres: {upstream: 127.0.0.1:5432, concurrency: {per_user: 2, queue: 3}}\n", []string{"postgres.concurrency.queue", "set a max_wait"}},
		{"grpc body", "policies: {api: {rate: 1/s}}\nenvoy: {ratelimit_config: [x.yaml], bounds: {body_timeout: 5s}}\n", []string{"envoy.bounds.body_timeout", "does not apply"}},
		{"redis without engine", head + "policies: {api: {rate: 1/s}}\nstorage: {redis: {addrs: [127.0.0.1:6379]}}\n", []string{"storage.redis", "would be ignored"}},
		{"sentinel master", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {mode: sentinel}, failure: {mode: fail_open}}\n", []string{"master_name"}},
		{"hybrid both", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: hybrid, redis: {}, hybrid: {local_fraction: 0.5, instances: 3}}\n", []string{"storage.hybrid", "not both"}},
		{"local without hybrid", head + "policies: {api: {rate: 50/s, burst: 100, local: {rate: 10/s, burst: 20}}}\n", []string{"policies.api.local", "only the hybrid engine"}},
		{"hybrid needs a share", head + "policies: {api: {rate: 50/s}, other: {rate: 10/s, local: {rate: 1/s}}}\nstorage: {engine: hybrid, redis: {addrs: [127.0.0.1:6379]}}\n", []string{"storage", "policy api, which gives no local limits"}},
		{"local overrides need a share", head + "policies: {api: {rate: 50/s, local: {rate: 10/s}, overrides: {k: {rate: 100/s}}}}\nstorage: {engine: hybrid, redis: {addrs: [127.0.0.1:6379]}}\n", []string{"storage", "overrides and tiers of policy api"}},
		{"local limits only", head + "policies: {api: {rate: 50/s, burst: 100, local: {rate: 10/s, burst: 20}}}\nstorage: {engine: hybrid, redis: {addrs: [127.0.0.1:6379]}}\n", nil},
		{"lease on memory", head + "policies: {api: {rate: 50/s, lease: auto}}\n", []string{"policies.api.lease", "set engine: redis"}},
		{"lease value", head + "policies: {api: {rate: 50/s, lease: yes}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open}}\n", []string{"policies.api.lease"}},
		{"lease max without lease", head + "policies: {api: {rate: 50/s, lease_max: 10}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open}}\n", []string{"policies.api.lease_max", "lease: auto only"}},
		{"lease max zero", head + "policies: {api: {rate: 50/s, lease: auto, lease_max: 0}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open}}\n", []string{"policies.api.lease_max", "at least 1"}},
		{"penalty negative", head + "policies: {api: {rate: 5/min, penalty: -15m}}\n", []string{"f.yaml:2:", "policies.api.penalty", "negative"}},
		{"penalty zero", head + "policies: {api: {rate: 5/min, penalty: 0s}}\n", []string{"policies.api.penalty", "blocks nothing", "remove penalty for none"}},
		{"penalty too short", head + "policies: {api: {rate: 5/min, penalty: 10ms}}\n", []string{"policies.api.penalty", "at least 1s"}},
		{"penalty absurd", head + "policies: {api: {rate: 5/min, penalty: 876000h}}\n", []string{"policies.api.penalty", "90 days"}},
		{"penalty overflows", head + "policies: {api: {rate: 5/min, penalty: 9999999999999h}}\n", []string{"policies.api.penalty"}},
		{"penalty not a duration", head + "policies: {api: {rate: 5/min, penalty: forever}}\n", []string{"policies.api.penalty"}},
		{"postgres penalty negative", head + "policies: {api: {rate: 5/min}}\npostgres: {upstream: 127.0.0.1:5432, rate_limit: {per_ip: {rate: 10/s, penalty: -1m}}}\n", []string{"postgres.rate_limit.per_ip.penalty", "negative"}},
		{"penalty", head + "policies: {api: {rate: 5/min, penalty: 15m}}\npostgres: {upstream: 127.0.0.1:5432, rate_limit: {per_ip: {rate: 10/s, penalty: 1h}}}\n", nil},
		{"lease auto", head + "policies: {api: {rate: 50/s, lease: auto, lease_max: 20}, other: {rate: 1/s, lease: off}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open}}\n", nil},
		{"retired breaker failures", head + "policies: {api: {rate: 1/s}}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: {mode: fail_open, breaker: {failures: 3}}}\n", []string{"storage.failure.breaker.failures", "replace failures with min_calls"}},
		{"nothing to serve", "policies: {api: {rate: 1/s}}\nadmin: {listen: 127.0.0.1:9090}\n", nil},
		{"duplicate key", head + "policies: {api: {rate: 1/s, rate: 2/s}}\n", []string{"f.yaml:2:", "already defined"}},
		{"two documents", head + "---\nlog: {}\n", []string{"several YAML documents"}},
		{"syntax", "policies: [\n", []string{"f.yaml:", "invalid YAML"}},
		{"listen conflict", head + "policies: {api: {rate: 1/s}}\nadmin: {listen: ':8080'}\n", []string{"admin.listen", "also proxy.listen"}},
		{"unreachable route", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api}]}, {match: {path: /x}}]}\n", []string{"proxy.routes[1]", "never matches"}},
		{"pattern", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{match: {path: '/users/{id'}}]}\n", []string{"proxy.routes[0].match.path"}},
		{"env unset", head + "policies: {api: {rate: 1/s}}\nadmin: {token: '${FLOODGATE_TEST_UNSET}'}\n", []string{"admin.token", "FLOODGATE_TEST_UNSET is not set"}},
		{"envoy file missing", head + "policies: {api: {rate: 1/s}}\nenvoy: {ratelimit_config: [nope.yaml]}\n", []string{"envoy.ratelimit_config[0]", "cannot read"}},
		{"check without policies", "check: {}\n", []string{"check", "there are none"}},
		{"envoy rule file", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n", []string{"f.yaml:1:1: domain: this is an envoyproxy/ratelimit rule file", "envoy: {ratelimit_config: [f.yaml]}"}},
		{"envoy descriptors mode", head + "policies: {api: {rate: 1/s}}\nenvoy: {ratelimit_config: [../examples/envoy/ratelimit-config.yaml], descriptors: each}\n", []string{"envoy.descriptors", "all_or_nothing, independent"}},
		{"envoy engine errors", head + "policies: {api: {rate: 1/s}}\nenvoy: {ratelimit_config: [../examples/envoy/ratelimit-config.yaml], engine_errors: grpc}\n", []string{"envoy.engine_errors", "failure_mode, status"}},
		{"concurrency without limit", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {queue: 2}}]}\n", []string{"proxy.routes[0].concurrency.limit", "positive limit"}},
		{"concurrency limit and adaptive", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {limit: 2, adaptive: {algorithm: aimd}}}]}\n", []string{"proxy.routes[0].concurrency.limit", "keep one"}},
		{"concurrency algorithm", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {adaptive: {algorithm: vegas}}}]}\n", []string{"proxy.routes[0].concurrency.adaptive.algorithm", "gradient"}},
		{"concurrency max_wait without queue", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {limit: 2, max_wait: 1s}}]}\n", []string{"proxy.routes[0].concurrency.max_wait", "set a queue"}},
		{"check concurrency without limit", "policies: {api: {rate: 1/s}}\ncheck: {concurrency: {reports: {lease: 5s}}}\n", []string{"check.concurrency.reports.limit", "positive limit"}},
		{"check concurrency negative lease", "policies: {api: {rate: 1/s}}\ncheck: {concurrency: {reports: {limit: 2, lease: -1s}}}\n", []string{"check.concurrency.reports.lease", "negative"}},
		{"concurrency negative queue", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {limit: 2, queue: -1}}]}\n", []string{"proxy.routes[0].concurrency.queue"}},
		{"concurrency shadow", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{shadow: true, concurrency: {limit: 2}}]}\n", []string{"proxy.routes[0].concurrency", "shadow"}},
		{"concurrency user key untrusted", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {limit: 2, key: user:X-User}}]}\n", []string{"proxy.routes[0].concurrency.key", "user_trusted_from"}},
		{"concurrency bad key", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {limit: 2, key: addr}}]}\n", []string{"proxy.routes[0].concurrency.key", "unknown key source"}},
		{"concurrency tolerance on aimd", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{concurrency: {adaptive: {algorithm: aimd, tolerance: 1.5}}}]}\n", []string{"proxy.routes[0].concurrency.adaptive.tolerance", "only gradient"}},
		{"concurrency ok", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, routes: [{limits: [{policy: api}], concurrency: {queue: 5, max_wait: 2s, key: [ip, route], adaptive: {algorithm: gradient, min_limit: 2, max_limit: 50}}}]}\n", nil},
		{"tier header without tiers", "policies: {api: {rate: 1/s}}\nproxy: {upstream: demo, user_trusted_from: [127.0.0.1], routes: [{limits: [{policy: api, tier_header: X-Plan}]}]}\n", []string{"tier_header", "no tiers"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("f.yaml", []byte(tc.yaml))
			if tc.want == nil {
				if tc.name == "nothing to serve" {
					if err == nil || !strings.Contains(err.Error(), "nothing to serve") {
						t.Fatalf("err = %v, want nothing to serve", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not Errors", err)
			}
			for _, e := range es {
				if e.Pos.File != "f.yaml" || e.Pos.Line == 0 {
					t.Errorf("error without a line: %v", e)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestAllErrors: one run reports every problem, in file order.
func TestAllErrors(t *testing.T) {
	src := `policies:
  a: {rate: 0/s}
  b: {rate: 10/s, burst: -3}
  c: {ratee: 1/s}
proxy:
  upstream: ftp://x
  listen: nope
`
	_, err := Parse("f.yaml", []byte(src))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	want := []string{"policies.a.rate", "policies.b.burst", "policies.c.ratee", "proxy.upstream", "proxy.listen"}
	if len(es) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(es), len(want), err)
	}
	for i, w := range want {
		if es[i].Path != w {
			t.Errorf("error %d at %s, want %s (%v)", i, es[i].Path, w, es[i])
		}
	}
	for i := 1; i < len(es); i++ {
		if es[i].Pos.Line < es[i-1].Pos.Line {
			t.Errorf("errors out of file order: %v then %v", es[i-1], es[i])
		}
	}
	if !errors.Is(err, floodgate.ErrInvalidLimit) && !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("rate error lost: %v", err)
	}
}

func TestParseRate(t *testing.T) {
	ok := map[string]Rate{
		"100/min":        {100, time.Minute},
		"100/m":          {100, time.Minute},
		"100/minute":     {100, time.Minute},
		"100 per minute": {100, time.Minute},
		"100/s":          {100, time.Second},
		"1000/h":         {1000, time.Hour},
		"5/1d":           {5, 24 * time.Hour},
		"10/30s":         {10, 30 * time.Second},
		"7/1h30m":        {7, 90 * time.Minute},
		"2/w":            {2, 7 * 24 * time.Hour},
		" 3 / sec ":      {3, time.Second},
		"1_000/h":        {1000, time.Hour},
		"5/15min":        {5, 15 * time.Minute},
		"9/3days":        {9, 72 * time.Hour},
		"4/500ms":        {4, 500 * time.Millisecond},
	}
	for s, want := range ok {
		got, err := ParseRate(s)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", s, got, err, want)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q.String() = %q) = %v, %v", s, got.String(), back, err)
		}
	}
	bad := map[string]string{
		"1.5/s":        "write 3/2s",
		"0/s":          "at least 1",
		"-1/s":         "at least 1",
		"100":          "no period",
		"10/0s":        "positive",
		"10/-1d":       "period",
		"x/s":          "not a whole number",
		"10/fortnight": "not a unit",
		"":             "not COUNT/PERIOD",
	}
	for s, want := range bad {
		if _, err := ParseRate(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRate(%q) error = %v, want it to say %q", s, err, want)
		}
	}
}

func TestFloodgatePolicies(t *testing.T) {
	src := `policies:
  login:
    limits:
      - {rate: 5/min}
      - {rate: 20/h, algorithm: sliding_window}
    overrides: {"user:batch_worker": {rate: 500/s, burst: 200}}
  plans:
    rate: 60/min
    algorithm: token_bucket
    tiers: {pro: {rate: 1000/min}}
    penalty: 15m
  daily:
    rate: 1000/d
    align: America/New_York
    overrides: {"ip:10.0.0.1": {rate: 5000/d}}
postgres:
  upstream: 127.0.0.1:5432
  rate_limit:
    per_user: {rate: 100/s, burst: 50, overrides: {batch_worker: {rate: 500/s, burst: 200}}}
`
	c, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := c.FloodgatePolicies()
	if err != nil {
		t.Fatal(err)
	}
	login := ps["login"]
	if ps["plans"].Penalty != 15*time.Minute || ps["daily"].Penalty != 0 {
		t.Errorf("penalties = %s and %s, want 15m and none", ps["plans"].Penalty, ps["daily"].Penalty)
	}
	if len(login.Limits) != 2 || login.Limits[1].Algorithm != floodgate.SlidingWindow || login.Limits[0] != floodgate.PerMinute(5) {
		t.Errorf("login = %+v", login.Limits)
	}
	if o := login.Overrides["user:batch_worker"]; len(o) != 1 || o[0] != floodgate.PerSecond(500).WithBurst(200) {
		t.Errorf("override = %+v", o)
	}
	if tier := ps["plans"].Tiers["pro"]; len(tier) != 1 || tier[0].Algorithm != floodgate.TokenBucket || tier[0].Rate != 1000 {
		t.Errorf("tier inherits the algorithm: %+v", tier)
	}
	daily := ps["daily"].Limits[0]
	if daily.Algorithm != floodgate.FixedWindow || daily.Location == nil || daily.Location.String() != "America/New_York" {
		t.Errorf("daily = %v", daily)
	}
	if o := ps["daily"].Overrides["ip:10.0.0.1"][0]; o.Location.String() != "America/New_York" || o.Algorithm != floodgate.FixedWindow {
		t.Errorf("override does not inherit the alignment: %v", o)
	}
	if pg := ps["postgres.per_user"]; pg.Name != "postgres.per_user" || pg.Limits[0] != floodgate.PerSecond(100).WithBurst(50) {
		t.Errorf("postgres per user = %+v", pg)
	}
	// Every built policy is accepted by the library.
	for name, p := range ps {
		for _, l := range p.Limits {
			if err := l.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}

	// A Config changed after Parse reports the offending field's position.
	p := c.Policies["login"]
	p.Limits[0].Burst = -1
	_, err = c.FloodgatePolicies()
	if err == nil || !strings.Contains(err.Error(), "p.yaml:4:") || !strings.Contains(err.Error(), "policies.login.limits[0].burst") {
		t.Errorf("err = %v, want it at p.yaml:4 policies.login.limits[0].burst", err)
	}
}

func TestEnvAndSecretFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "redis-password"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FG_TEST_ADDR", "127.0.0.1:6390")
	t.Setenv("FG_TEST_TOKEN", "tok")
	src := `storage:
  engine: redis
  redis:
    addrs: ["${FG_TEST_ADDR}"]
    password_file: redis-password
    db: ${FG_TEST_DB:-3}
    tls: {ca: ca.pem}
  failure: {mode: fail_closed}
policies: {api: {rate: 1/s}}
check:
  token: ${FG_TEST_TOKEN}
admin:
  token: "$${literal}"
`
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Storage.Redis
	if r.Addrs[0] != "127.0.0.1:6390" || r.Password != "s3cret" || r.DB != 3 {
		t.Errorf("redis = %+v", r)
	}
	if r.TLS.CA != filepath.Join(dir, "ca.pem") {
		t.Errorf("ca = %q, want it next to the file", r.TLS.CA)
	}
	if c.Check.Token != "tok" || c.Admin.Token != "${literal}" {
		t.Errorf("tokens = %q, %q", c.Check.Token, c.Admin.Token)
	}
	out, err := MarshalRedacted(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret", "tok\n", "${literal}"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("redacted output shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(string(out), Redacted) || !strings.Contains(string(out), "password_file:") {
		t.Errorf("redacted output lacks the markers:\n%s", out)
	}
	if c.Storage.Redis.Password != "s3cret" {
		t.Error("Redact changed the original")
	}
}

// TestMarshalRoundTrip: the effective configuration parses back to the
// same configuration.
func TestMarshalRoundTrip(t *testing.T) {
	exampleEnv(t)
	files, _ := filepath.Glob("../examples/config/*.yaml")
	for _, f := range files {
		if strings.Contains(f, "envoy") {
			continue // its rules file is relative to the example's directory
		}
		c, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(f, out)
		if err != nil {
			t.Fatalf("%s: effective config does not parse: %v\n%s", f, err, out)
		}
		out2, _ := c2.Marshal()
		if string(out) != string(out2) {
			t.Errorf("%s: round trip differs:\n%s\n---\n%s", f, out, out2)
		}
	}
}

// TestHostileYAML: self-referring merges and alias fan-out end in an
// error, not a stack overflow or an explosion of work.
func TestHostileYAML(t *testing.T) {
	for _, src := range []string{
		"policies: {x: &a {<<: *a}}\n",
		"policies: &a {x: {<<: *a}}\n",
		"proxy: &p {routes: [*p]}\n",
		"a: &a [*a, *a]\n",
	} {
		if _, err := Parse("h.yaml", []byte(src)); err == nil {
			t.Errorf("%q: no error", src)
		}
	}
}

func TestAnchors(t *testing.T) {
	src := `x-limits:
  strict: &strict {rate: 5/min, algorithm: sliding_window}
policies:
  login: *strict
  signup:
    <<: *strict
    rate: 3/min
proxy: {upstream: demo}
`
	c, err := Parse("a.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Policies["login"]; l.Rate.String() != "5/min" || l.Algorithm != "sliding_window" {
		t.Errorf("login = %+v", l)
	}
	if s := c.Policies["signup"]; s.Rate.String() != "3/min" || s.Algorithm != "sliding_window" {
		t.Errorf("signup = %+v", s)
	}
	if _, err := Parse("a.yaml", []byte("policies: {a: *nope}\nproxy: {upstream: demo}\n")); err == nil {
		t.Error("an unknown alias was accepted")
	}
}

// TestNullLeavesDefault: "field:" with no value keeps the default.
func TestNullLeavesDefault(t *testing.T) {
	c, err := Parse("n.yaml", []byte("policies: {api: {rate: 1/s}}\nproxy:\n  upstream: demo\n  listen:\n  routes:\n    - limits: [{policy: api, key: , cost: }]\nshutdown_timeout:\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Proxy.Routes[0].Limits[0]
	if c.Proxy.Listen != DefaultProxyListen || c.ShutdownTimeout.D() != DefaultShutdownTimeout || l.Key.String() != "ip" || l.Cost.Units != 1 {
		t.Errorf("defaults lost: listen %q, shutdown %s, key %s, cost %s", c.Proxy.Listen, c.ShutdownTimeout.D(), l.Key, l.Cost)
	}
}

// TestUnknownAliases: an alias to no anchor, anywhere a value can be, is
// an error and never a crash.
func TestUnknownAliases(t *testing.T) {
	for _, src := range []string{
		"proxy: {upstream: demo, routes: [{limits: [{policy: p, key: [*nope]}]}]}\n",
		"policies: {a: {<<: [*nope]}}\nproxy: {upstream: demo}\n",
		"policies: {a: {<<: *nope}}\nproxy: {upstream: demo}\n",
		"proxy: {upstream: *nope}\n",
		"storage: {redis: {addrs: [*nope]}}\n",
	} {
		if _, err := Parse("u.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "unknown alias") {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// TestIndentationErrors: a layout mistake is reported at the line to fix,
// with what to do about it.
func TestIndentationErrors(t *testing.T) {
	for _, tc := range []struct {
		src, at, hint string
	}{
		{"policies:\n  api: {rate: 10/min}\nproxy:\n  upstream: demo\n    listen: :8080\n", "f.yaml:5:5", "indented more than line 4"},
		{"policies:\n  api:\n    rate: 10/min\n   burst: 5\nproxy: {upstream: demo}\n", "f.yaml:4:", "check the indentation"},
		{"policies:\n\tapi: {rate: 10/min}\nproxy: {upstream: demo}\n", "f.yaml:2:", "never tabs"},
	} {
		_, err := Parse("f.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.at) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%q: %v, want %s and %q", tc.src, err, tc.at, tc.hint)
		}
	}
}

// TestTooManyRouteLimits: a route with more limits than one request is
// checked against is refused at the route, naming the way out.
func TestTooManyRouteLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := range 9 {
		fmt.Fprintf(&b, "  p%d: {rate: 1/s}\n", i)
	}
	b.WriteString("proxy:\n  upstream: demo\n  routes:\n    - limits:\n")
	for i := range 9 {
		fmt.Fprintf(&b, "        - {policy: p%d}\n", i)
	}
	_, err := Parse("f.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "proxy.routes[0].limits: 9 limits, more than the 8") {
		t.Errorf("9 limits on a route: %v", err)
	}
}

// A timeout raised above the default slow timeout raises the slow timeout
// with it, so that timeout alone stays a valid setting; a slow timeout set
// is kept.
func TestSlowTimeoutFollowsTimeout(t *testing.T) {
	for _, tc := range []struct {
		failure string
		want    time.Duration
	}{
		{"{mode: fail_open}", DefaultSlowTimeout},
		{"{mode: fail_open, timeout: 2s}", 2 * time.Second},
		{"{mode: fail_open, timeout: 50ms}", DefaultSlowTimeout},
		{"{mode: fail_open, timeout: 50ms, slow_timeout: 80ms}", 80 * time.Millisecond},
	} {
		c, err := Parse("f.yaml", []byte("policies: {api: {rate: 1/s}}\ncheck: {listen: 127.0.0.1:0}\nstorage: {engine: redis, redis: {addrs: [127.0.0.1:6379]}, failure: "+tc.failure+"}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.failure, err)
		}
		if got := c.Storage.Failure.SlowTimeout.D(); got != tc.want {
			t.Errorf("%s: slow_timeout %s, want %s", tc.failure, got, tc.want)
		}
	}
}

// A secret file is read bounded: a path that names a huge file (a log, a
// device) is refused by name instead of read whole.
func TestSecretFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), bytes.Repeat([]byte("a"), 100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte("policies: {api: {rate: 1/s}}\ncheck: {token_file: token}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "larger than 64 KiB") || !strings.Contains(err.Error(), "check.token_file") {
		t.Fatalf("err = %v, want the token file refused as larger than 64 KiB at check.token_file", err)
	}
}
