package envoyrules

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate"
)

// A * anywhere in a value matches any run of characters, as
// envoyproxy/ratelimit matches since it split patterns at every *; the
// exact value still wins, and of the wildcards the first in the file.
func TestWildcardInside(t *testing.T) {
	r := mustEnvoy(t, `domain: w
descriptors:
  - {key: mid, value: bar*b, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: multi, value: foo*bar*baz, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: multi, value: "*baz", rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: multi, value: foo1bar2baz, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: host, value: "*.example.com", rate_limit: {unit: minute, requests_per_unit: 5}}
`)
	for _, c := range []struct {
		key, value, policy string
	}{
		{"mid", "barXb", "w.mid_bar*b"},
		{"mid", "barb", "w.mid_bar*b"},
		{"mid", "bar*b", "w.mid_bar*b"},
		{"mid", "bab", ""}, // "bar" and "b" may not overlap
		{"mid", "barbx", ""},
		{"multi", "foo-bar-baz", "w.multi_foo*bar*baz"},
		{"multi", "foobarbaz", "w.multi_foo*bar*baz"},
		{"multi", "foobazbar", ""},
		{"multi", "xbaz", "w.multi_*baz"},
		{"multi", "foo1bar2baz", "w.multi_foo1bar2baz"},
		{"host", "api.example.com", "w.host_*.example.com"},
		{"host", "example.com", ""},
	} {
		rule := r.Match("w", entries(c.key, c.value))
		got := ""
		if rule != nil {
			got = rule.Policy
		}
		if got != c.policy {
			t.Errorf("%s=%s matched %q, want %q", c.key, c.value, got, c.policy)
		}
	}
}

// matches agrees with a regular expression built from the same pattern.
func FuzzWildcard(f *testing.F) {
	for _, s := range [][2]string{{"bar*b", "barXb"}, {"foo*bar*baz", "foobarbaz"}, {"*", ""}, {"a**b", "ab"}, {"*a*", "bab"}, {"ab*ba", "aba"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if !strings.Contains(pattern, "*") || !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			return // regexp reads only UTF-8; the matcher is bytewise
		}
		parts := strings.Split(pattern, "*")
		quoted := make([]string, len(parts))
		for i, p := range parts {
			quoted[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile(`\A(?s:` + strings.Join(quoted, ".*") + `)\z`)
		if got, want := matches(parts, value), re.MatchString(value); got != want {
			t.Fatalf("matches(%q, %q) = %v, the pattern as a regular expression says %v", pattern, value, got, want)
		}
	})
}

// share_threshold: every value a wildcard matches shares one bucket (the
// key spells the wildcard), at any level and with the same key twice in
// one descriptor; without it each value has its own.
func TestShareThreshold(t *testing.T) {
	r := mustEnvoy(t, `domain: s
descriptors:
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - {key: files, value: nested/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 300}}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        descriptors:
          - {key: type, rate_limit: {unit: minute, requests_per_unit: 120}}
  - {key: own, value: own/*, rate_limit: {unit: minute, requests_per_unit: 1}}
`)
	key := func(kv ...string) string {
		t.Helper()
		rule := r.Match("s", entries(kv...))
		if rule == nil {
			t.Fatalf("%v matched nothing", kv)
		}
		return rule.Key
	}
	if a, b := key("files", "files/a"), key("files", "files/b"); a != b || a != "files=files/*" {
		t.Errorf("shared keys %q and %q, want both files=files/*", a, b)
	}
	if a, b := key("files", "top/a", "files", "nested/b"), key("files", "top/c", "files", "nested/d"); a != b {
		t.Errorf("nested shared keys %q and %q differ", a, b)
	}
	a, b, c := key("path", "path/a", "file", "file/x", "type", "t"), key("path", "path/b", "file", "file/x", "type", "t"), key("path", "path/c", "file", "file/y", "type", "t")
	if a != b || a == c {
		t.Errorf("path keys %q %q %q: the shared level shares, the other does not", a, b, c)
	}
	if a, b := key("own", "own/a"), key("own", "own/b"); a == b {
		t.Errorf("without share_threshold two values share %q", a)
	}

	_, err := Parse("bad.yaml", []byte("domain: s\ndescriptors:\n  - {key: k, value: exact, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 1}}\n"))
	if err == nil || !strings.Contains(err.Error(), "share_threshold needs a wildcard value") || !strings.Contains(err.Error(), "bad.yaml:3:") {
		t.Errorf("share_threshold on an exact value: %v", err)
	}
}

// The fields of current envoyproxy/ratelimit files load with their
// meaning: quota_mode on the rule, metadata kept as written,
// value_to_metric and detailed_metric in the metric key.
func TestCurrentFields(t *testing.T) {
	r := mustEnvoy(t, `domain: f
descriptors:
  - key: route
    value: api/*
    value_to_metric: true
    descriptors:
      - key: method
        quota_mode: true
        rate_limit: {unit: minute, requests_per_unit: 60}
        metadata:
          name: service_1
          tiers: [gold, {silver: 2}]
  - {key: user, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: plain, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: blocked, rate_limit: {unit: hour, requests_per_unit: 0}}
`)
	rule := r.Match("f", entries("route", "api/v1", "method", "GET"))
	if rule == nil || !rule.Quota {
		t.Fatalf("quota rule: %+v", rule)
	}
	if rule.MetricKey != "f.route_api/v1.method" {
		t.Errorf("value_to_metric metric key %q", rule.MetricKey)
	}
	if rule.Metadata["name"] != "service_1" {
		t.Errorf("metadata %#v", rule.Metadata)
	}
	tiers, _ := rule.Metadata["tiers"].([]any)
	if len(tiers) != 2 || tiers[0] != "gold" {
		t.Errorf("metadata tiers %#v", rule.Metadata["tiers"])
	}
	if m := r.Match("f", entries("user", "u1")).MetricKey; m != "f.user_u1" {
		t.Errorf("detailed metric key %q", m)
	}
	if m := r.Match("f", entries("plain", "p")).MetricKey; m != "f.plain" {
		t.Errorf("plain metric key %q", m)
	}
	if b := r.Match("f", entries("blocked", "x")); b == nil || !b.Blocked || b.BlockedPeriod != time.Hour {
		t.Errorf("blocked rule %+v", b)
	}
}

// merge_domains joins several files of one domain; without it they are an
// error, and a descriptor given in two merged files is one too.
func TestMergeDomains(t *testing.T) {
	a := Source{"a.yaml", []byte("domain: d\ndescriptors:\n  - {key: k1, rate_limit: {unit: minute, requests_per_unit: 10}}\n")}
	b := Source{"b.yaml", []byte("domain: d\ndescriptors:\n  - {key: k2, rate_limit: {unit: minute, requests_per_unit: 20}}\n")}
	dup := Source{"c.yaml", []byte("domain: d\ndescriptors:\n  - {key: k1, rate_limit: {unit: minute, requests_per_unit: 5}}\n")}
	if _, errs := Compile([]Source{a, b}, floodgate.FixedWindow); len(errs) == 0 || !strings.Contains(errs.Error(), "merge_domains") {
		t.Errorf("two files of one domain without merging: %v", errs)
	}
	r, errs := CompileWith([]Source{a, b}, Options{Algorithm: floodgate.FixedWindow, MergeDomains: true})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for k, rate := range map[string]int64{"k1": 10, "k2": 20} {
		if rule := r.Match("d", entries(k, "x")); rule == nil || rule.Limits[0].Rate != rate {
			t.Errorf("merged %s: %+v", k, rule)
		}
	}
	if _, errs := CompileWith([]Source{a, dup}, Options{Algorithm: floodgate.FixedWindow, MergeDomains: true}); len(errs) == 0 || !strings.Contains(errs.Error(), "c.yaml") {
		t.Errorf("a descriptor in two merged files: %v", errs)
	}
}
