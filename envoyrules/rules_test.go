package envoyrules

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func entries(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

func mustEnvoy(t *testing.T, src string) *Rules {
	t.Helper()
	r, err := Parse("rl.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The shapes below follow the examples of envoyproxy/ratelimit's
// documentation of its configuration format.
func TestEnvoyMatch(t *testing.T) {
	messaging := mustEnvoy(t, `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`)
	edge := mustEnvoy(t, `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 20, algorithm: gcra, burst: 5}
  - key: path
    value: /api/admin
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: whitelisted
  - key: user
    shadow_mode: true
    detailed_metric: true
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 1000}
`)
	day := 24 * time.Hour
	cases := []struct {
		name    string
		rules   *Rules
		domain  string
		entries []Entry
		policy  string // "" = no rule
		key     string
		limits  []floodgate.Limit
		check   func(*Rule) bool
	}{
		{"nested", messaging, "messaging", entries("message_type", "marketing", "to_number", "2061111111"),
			"messaging.message_type_marketing.to_number", "message_type=marketing|to_number=2061111111",
			[]floodgate.Limit{{Rate: 5, Period: day, Algorithm: floodgate.FixedWindow}}, nil},
		{"top level", messaging, "messaging", entries("to_number", "2061111111"),
			"messaging.to_number", "to_number=2061111111", []floodgate.Limit{{Rate: 100, Period: day, Algorithm: floodgate.FixedWindow}}, nil},
		{"depth must match", messaging, "messaging", entries("message_type", "marketing"), "", "", nil, nil},
		{"too deep", messaging, "messaging", entries("to_number", "1", "x", "y"), "", "", nil, nil},
		{"unknown domain", messaging, "other", entries("to_number", "1"), "", "", nil, nil},
		{"no entries", messaging, "messaging", nil, "", "", nil, nil},
		{"value not listed", messaging, "messaging", entries("message_type", "transactional", "to_number", "1"), "", "", nil, nil},
		{"per address", edge, "edge", entries("remote_address", "10.0.0.1"), "edge.remote_address", "remote_address=10.0.0.1",
			[]floodgate.Limit{{Rate: 10, Period: time.Second, Algorithm: floodgate.FixedWindow}}, nil},
		{"exact wins, blocked", edge, "edge", entries("remote_address", "50.0.0.5"), "edge.remote_address_50.0.0.5", "remote_address=50.0.0.5",
			nil, func(r *Rule) bool { return r.Blocked }},
		{"exact over wildcard", edge, "edge", entries("path", "/api/admin"), "edge.path_/api/admin", "path=/api/admin",
			[]floodgate.Limit{{Rate: 2, Period: time.Minute, Algorithm: floodgate.FixedWindow}}, nil},
		{"wildcard", edge, "edge", entries("path", "/api/users"), "edge.path_/api/*", "path=/api/users",
			[]floodgate.Limit{{Rate: 20, Period: time.Minute, Burst: 5, Algorithm: floodgate.GCRA}}, nil},
		{"key only after wildcard", edge, "edge", entries("path", "/static/x"), "edge.path", "path=/static/x",
			[]floodgate.Limit{{Rate: 1000, Period: time.Minute, Algorithm: floodgate.FixedWindow}}, nil},
		{"unlimited", edge, "edge", entries("ldap", "x"), "edge.ldap", "ldap=x", nil, func(r *Rule) bool { return r.Unlimited }},
		{"whitelisted", edge, "edge", entries("whitelisted", "x"), "", "", nil, nil},
		{"several limits, shadow, metric", edge, "edge", entries("user", "a|b=c"), "edge.user", `user=a\|b\=c`,
			[]floodgate.Limit{{Rate: 10, Period: time.Second, Algorithm: floodgate.FixedWindow}, {Rate: 1000, Period: time.Hour, Algorithm: floodgate.FixedWindow}},
			func(r *Rule) bool { return r.Shadow && r.DetailedMetric && r.MetricKey == "edge.user_a|b=c" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rules.Match(tc.domain, tc.entries)
			if tc.policy == "" {
				if r != nil {
					t.Fatalf("matched %+v, want nothing", r)
				}
				return
			}
			if r == nil {
				t.Fatal("no match")
			}
			if r.Policy != tc.policy || r.Key != tc.key {
				t.Errorf("policy, key = %q, %q; want %q, %q", r.Policy, r.Key, tc.policy, tc.key)
			}
			if len(r.Limits) != len(tc.limits) {
				t.Fatalf("limits = %v, want %v", r.Limits, tc.limits)
			}
			for i := range r.Limits {
				if r.Limits[i] != tc.limits[i] {
					t.Errorf("limit %d = %v, want %v", i, r.Limits[i], tc.limits[i])
				}
			}
			if tc.check != nil && !tc.check(r) {
				t.Errorf("flags wrong: %+v", r)
			}
		})
	}
	// Values are taken as written: no environment expansion.
	lit := mustEnvoy(t, "domain: l\ndescriptors:\n  - {key: k, value: '${NOT_AN_ENV_VAR}', rate_limit: {unit: second, requests_per_unit: 1}}\n")
	if lit.Match("l", entries("k", "${NOT_AN_ENV_VAR}")) == nil {
		t.Error("a value with ${ was not kept literally")
	}
	// A key containing _ is matched by key and value, not their join.
	under := mustEnvoy(t, "domain: u\ndescriptors:\n  - key: a_b\n    value: c\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if r := under.Match("u", entries("a", "b_c")); r != nil {
		t.Errorf("(a, b_c) matched the rule of (a_b, c): %+v", r)
	}
	if r := under.Match("u", entries("a_b", "c")); r == nil {
		t.Error("(a_b, c) not matched")
	}
	// Distinct values of an entry without a fixed value get distinct keys.
	a := edge.Match("edge", entries("remote_address", "10.0.0.1"))
	b := edge.Match("edge", entries("remote_address", "10.0.0.2"))
	if a.Policy != b.Policy || a.Key == b.Key {
		t.Errorf("one policy, two buckets expected: %+v %+v", a, b)
	}
	if ps := edge.Policies(); len(ps["edge.user"].Limits) != 2 || ps["edge.ldap"].Name != "" {
		t.Errorf("policies = %+v", ps)
	}
}

func TestEnvoyReplaces(t *testing.T) {
	r := mustEnvoy(t, `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
`)
	d1 := entries("key_1", "value_1", "user", "bkthomps")
	d2 := entries("key_2", "value_2", "user", "bkthomps")
	both := r.MatchRequest("example7", [][]Entry{d1, d2})
	if both[0] != nil || both[1] == nil || both[1].Limits[0].Rate != 10 {
		t.Errorf("with both descriptors = %+v, want only the 10/s", both)
	}
	alone := r.MatchRequest("example7", [][]Entry{d1})
	if alone[0] == nil || alone[0].Limits[0].Rate != 5 {
		t.Errorf("alone = %+v, want 5/s", alone)
	}
}

func TestEnvoyErrors(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"no domain":      {"descriptors: []\n", "rl.yaml:1:1: domain: the file needs a domain"},
		"unknown key":    {"domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n", `rl.yaml:4:5: descriptors[0].rate_limt: unknown field "rate_limt"; did you mean "rate_limit"?`},
		"empty key":      {"domain: d\ndescriptors:\n  - value: a\n", "descriptors[0]: a descriptor needs a key"},
		"bad unit":       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n", `did you mean "minute"?`},
		"year":           {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1}\n", "longer than the supported"},
		"no unit":        {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", "needs a unit"},
		"unlimited unit": {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "takes no unit"},
		"duplicate":      {"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", "duplicate descriptor \"d.a\""},
		"self replace":   {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n", "cannot replace itself"},
		"negative":       {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "must not be negative"},
		"both forms":     {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: second, requests_per_unit: 1}]\n", "not both"},
		"joined names":   {"domain: d\ndescriptors:\n  - {key: a_b, value: c}\n  - {key: a, value: b_c}\n", `named "d.a_b_c" like descriptors[0]`},
		"window burst":   {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n", "descriptors[0].rate_limit.burst"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("rl.yaml", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	_, err := Load("../examples/envoy/ratelimit-config.yaml", "../examples/envoy/ratelimit-config.yaml")
	if err == nil || !strings.Contains(err.Error(), "also defined in") {
		t.Errorf("duplicate domain: %v", err)
	}
}

func TestEnvoyExample(t *testing.T) {
	r, err := Load("../examples/envoy/ratelimit-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	req := [][]Entry{
		entries("header_match", "write", "remote_address", "10.0.0.1"),
		entries("api_key", "partner-acme", "remote_address", "10.0.0.1"),
		entries("remote_address", "10.0.0.1"),
	}
	got := r.MatchRequest("edge", req)
	if got[0] != nil {
		t.Errorf("the partner limit should replace write_per_ip: %+v", got[0])
	}
	if got[1] == nil || got[1].Limits[0].Rate != 600 || got[2] == nil || got[2].Limits[0].Rate != 10 {
		t.Errorf("got %+v %+v", got[1], got[2])
	}
}

func TestExamplesLoad(t *testing.T) {
	files, _ := filepath.Glob("../examples/envoy/*.yaml")
	if len(files) == 0 {
		t.Fatal("no envoy examples")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestAliasFanOut: a file whose aliases fan out is refused quickly, not
// expanded.
func TestAliasFanOut(t *testing.T) {
	bomb := "domain: d\ndescriptors: &a [{key: x, descriptors: *a}, {key: y, descriptors: *a}]\n"
	if _, err := Parse("h.yaml", []byte(bomb)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("alias fan-out: %v", err)
	}
}
