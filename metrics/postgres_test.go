package metrics_test

import (
	"bytes"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/pgproxy"
)

// TestPostgres: every series of the PostgreSQL proxy exists at zero from
// the start, each Observer call moves its own, and observing allocates
// nothing. (pgproxy's tests read these metrics through a real server.)
func TestPostgres(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewPostgres(reg, metrics.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// 9 queries + 3 uncharged + 9 waits + seconds + waiting + 2 denied +
	// conns + upstream + malformed + 3 cancels + refused + 2 bytes.
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 34 {
		t.Fatalf("%d series at the start, %v; want 34", n, err)
	}
	var o pgproxy.Observer = m
	o.QueryChecked(pgproxy.LevelIP, pgproxy.Allowed)
	o.QueryChecked(pgproxy.LevelUser, pgproxy.Failed)
	o.QueryUncharged(pgproxy.UnchargedEmpty)
	o.WaitStarted()
	o.WaitStarted()
	o.WaitEnded(pgproxy.LevelGlobal, pgproxy.WaitCanceled, 1500*time.Millisecond)
	o.ClientConnected()
	o.ConnectionDenied(pgproxy.LevelIP)
	o.ConnectionDenied(pgproxy.LevelGlobal) // no such series: ignored
	o.CancelRequest(pgproxy.CancelUnknownKey)
	o.Relayed(pgproxy.ServerToClient, 4096)
	o.QueryChecked(pgproxy.Level(9), pgproxy.QueryOutcome(9)) // out of range: ignored
	for name, want := range map[string]float64{
		`floodgate_pg_queries_total{decision="allowed",scope="ip"}`:         1,
		`floodgate_pg_queries_total{decision="error",scope="user"}`:         1,
		`floodgate_pg_queries_uncharged_total{reason="empty"}`:              1,
		`floodgate_pg_query_waits_total{outcome="canceled",scope="global"}`: 1,
		`floodgate_pg_query_wait_seconds_total`:                             1.5,
		`floodgate_pg_queries_waiting`:                                      1,
		`floodgate_pg_client_connections`:                                   1,
		`floodgate_pg_connections_denied_total{scope="ip"}`:                 1,
		`floodgate_pg_cancel_requests_total{result="unknown_key"}`:          1,
		`floodgate_pg_bytes_total{direction="server_to_client"}`:            4096,
		`floodgate_pg_bytes_total{direction="client_to_server"}`:            0,
		`floodgate_pg_queries_total{decision="allowed",scope="global"}`:     0,
	} {
		if got := sample(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		o.QueryChecked(pgproxy.LevelGlobal, pgproxy.Allowed)
		o.Relayed(pgproxy.ClientToServer, 100)
		o.WaitStarted()
		o.WaitEnded(pgproxy.LevelUser, pgproxy.WaitPassed, time.Millisecond)
	}); n != 0 {
		t.Errorf("%v allocations per observation", n)
	}
	if _, err := metrics.NewPostgres(reg, metrics.PostgresOptions{}); err == nil {
		t.Error("a second Postgres on one registry was registered")
	}
	if _, err := metrics.NewPostgres(nil, metrics.PostgresOptions{}); err == nil {
		t.Error("a nil registerer was accepted")
	}

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(rec.Body.String())
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// sample returns the value of one series, written as in the exposition
// format (labels in name order).
func sample(t *testing.T, reg prometheus.Gatherer, series string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			b.WriteString(mf.GetName())
			if len(m.GetLabel()) > 0 {
				b.WriteByte('{')
				for i, l := range m.GetLabel() {
					if i > 0 {
						b.WriteByte(',')
					}
					b.WriteString(l.GetName() + `="` + l.GetValue() + `"`)
				}
				b.WriteByte('}')
			}
			if b.String() != series {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}
