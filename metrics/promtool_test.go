package metrics_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/testkit"
)

func promtool(t *testing.T) string {
	t.Helper()
	return testkit.RequireBinary(t, "promtool", "prometheus")
}

// TestPromtoolLint runs promtool's linter over every metric the package
// exports, as served on /metrics: names, units, suffixes and help texts
// follow Prometheus conventions.
func TestPromtoolLint(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{})
	s := memStore(t, memstore.Options{})
	g, err := failover.NewGuard(s, failover.GuardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.GuardOptions("redis", failover.GuardOptions{}) // exports the transitions
	if err := m.WatchGuard("redis", g); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemory("memory", s); err != nil {
		t.Fatal(err)
	}
	lim := m.Limiter(floodgatetest.NewLimiter(t, g, "api", floodgate.PerSecond(1)))
	for _, cost := range []int64{1, 1, 0} {
		if _, err := lim.AllowN(context.Background(), "k", cost); err != nil {
			t.Fatal(err)
		}
	}

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, name := range []string{
		"floodgate_decisions_total", "floodgate_peeks_total", "floodgate_decision_duration_seconds_bucket",
		"floodgate_engine_errors_total", "floodgate_breaker_state", "floodgate_breaker_transitions_total",
		"floodgate_memory_keys", "floodgate_memory_evictions_total",
	} {
		if !strings.Contains(body, "\n"+name+"{") {
			t.Errorf("/metrics has no %s", name)
		}
	}
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestDocumentedAlerts checks the alerting rules of docs/metrics.md with
// promtool, so the page never shows a rule that does not load.
func TestDocumentedAlerts(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	rules, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/metrics.md has no yaml block of alerting rules")
	}
	var b strings.Builder
	b.WriteString("groups:\n- name: floodgate\n  rules:\n")
	for line := range strings.Lines(rules) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	file := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool(t), "check", "rules", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}
