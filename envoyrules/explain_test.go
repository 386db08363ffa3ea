package envoyrules

import (
	"slices"
	"strings"
	"testing"
)

// TestExplain: each descriptor gets MatchOverrides's rule, or the reason
// it has none; KeyShapes spells the keys the rules count by.
func TestExplain(t *testing.T) {
	r := mustEnvoy(t, `domain: edge
descriptors:
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit: {name: login, requests_per_unit: 5, unit: second}
  - key: files
    value: "a*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: over
    rate_limit:
      replaces: [{name: login}]
      requests_per_unit: 10
      unit: second
`)
	descs := [][]Entry{
		entries("one_per_minute", "a"),
		entries("path", "/login", "user", "bob"),
		entries("path", "/other"),
		entries("path", "/login"),
		entries("one_per_minute", "a", "x", "y"),
		{},
		entries("over", "1"),
		entries("files", "abc"),
	}
	got := r.Explain("edge", descs, nil)
	rules := r.MatchRequest("edge", descs)
	for i, m := range got {
		if m.Rule != nil && (rules[i] == nil || m.Rule.Policy != rules[i].Policy || m.Rule.Key != rules[i].Key) || (m.Rule == nil) != (rules[i] == nil) {
			t.Errorf("descriptor %d: %+v, MatchRequest says %+v", i, m.Rule, rules[i])
		}
		if (m.Rule == nil) == (m.Why == "") {
			t.Errorf("descriptor %d: rule %v, why %q", i, m.Rule, m.Why)
		}
	}
	for i, want := range map[int]string{
		1: "replaces",
		2: "no rule at depth 1 matches the entry path=/other",
		3: "no rate_limit of its own",
		4: "has no descriptors below it",
		5: "no entries",
	} {
		if !strings.Contains(got[i].Why, want) {
			t.Errorf("descriptor %d: why %q, want %q", i, got[i].Why, want)
		}
	}
	if m := r.Explain("nope", descs[:1], nil); !strings.Contains(m[0].Why, `no configuration has the domain "nope"; the domains are edge`) {
		t.Errorf("unknown domain: %q", m[0].Why)
	}

	shapes := r.KeyShapes()
	for policy, want := range map[string]string{
		"edge.one_per_minute":   "one_per_minute={value}",
		"edge.path_/login.user": "path=/login|user={value}",
		"edge.files_a*":         "files=a*",
		"edge.over":             "over={value}",
	} {
		if !slices.Contains(shapes[policy], want) {
			t.Errorf("shapes of %s: %q, want %q (all: %v)", policy, shapes[policy], want, shapes)
		}
	}
}
