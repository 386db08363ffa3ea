package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
	"github.com/floodgate-go/floodgate/testkit"
)

// exportedNames returns the metric families a daemon exports, histogram
// and counter suffixes included.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(`
storage:
  engine: hybrid
  redis: {addrs: [127.0.0.1:1]}
  hybrid: {local_fraction: 0.5}
policies: {api: {rate: 5/s}}
proxy: {listen: 127.0.0.1:0, upstream: demo, routes: [{limits: [{policy: api}]}]}
postgres: {listen: 127.0.0.1:0, upstream: 127.0.0.1:1, rate_limit: {per_user: {rate: 5/s}}}
admin: {listen: ""}
`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	var reg prometheus.Gatherer = d.Registry()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[n+s] = true
		}
	}
	// Series that appear with the first decision.
	for _, n := range []string{"floodgate_decisions_total", "floodgate_decision_duration_seconds_bucket"} {
		names[n] = true
	}
	return names
}

var metricRef = regexp.MustCompile(`\bfloodgate_[a-z_]+\b`)

// TestAlertsAndDashboard: the shipped alerting rules load in promtool, and
// the rules and the Grafana dashboard name only metrics floodgate exports,
// so neither can drift from the code.
func TestAlertsAndDashboard(t *testing.T) {
	promtool := testkit.RequireBinary(t, "promtool", "prometheus")
	rules := "../../examples/prometheus/alerts.yaml"
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	names := exportedNames(t)
	check := func(file, text string) {
		for _, ref := range metricRef.FindAllString(text, -1) {
			if !names[ref] {
				t.Errorf("%s uses %s, which floodgate does not export", file, ref)
			}
		}
	}
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	check(rules, string(b))
	dash := "../../examples/grafana/floodgate-dashboard.json"
	db, err := os.ReadFile(dash)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(db, &d); err != nil {
		t.Fatalf("%s: %v", dash, err)
	}
	if len(d.Panels) < 6 {
		t.Fatalf("%s has %d panels", dash, len(d.Panels))
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			check(dash+" panel "+p.Title, tg.Expr)
		}
	}
}
