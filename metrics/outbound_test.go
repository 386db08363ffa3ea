package metrics_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/outbound"
)

// An upstream that refuses once, then fails: the refusal is a pause, a
// wait and a retry; the failure opens the breaker.
func TestOutbound(t *testing.T) {
	var n atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer up.Close()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewOutbound(reg, metrics.OutboundOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := outbound.New(outbound.Options{Observer: m, Upstream: func(*http.Request) string { return "partner" },
		Breaker: failover.GuardOptions{MinCalls: 1, Backoff: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", up.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Fatalf("got %d; want the retry's 500", resp.StatusCode)
	}
	compare(t, reg, `
# HELP floodgate_outbound_pauses_total Pauses of an upstream set by its answers, by upstream and the answer's status code.
# TYPE floodgate_outbound_pauses_total counter
floodgate_outbound_pauses_total{code="429",upstream="partner"} 1
# HELP floodgate_outbound_retries_total Refused outbound requests sent again, by upstream and the refusal's status code.
# TYPE floodgate_outbound_retries_total counter
floodgate_outbound_retries_total{code="429",upstream="partner"} 1
# HELP floodgate_outbound_breaker_state State of an upstream's circuit breaker: 0 closed, 1 open, 2 half-open.
# TYPE floodgate_outbound_breaker_state gauge
floodgate_outbound_breaker_state{upstream="partner"} 1
# HELP floodgate_outbound_breaker_transitions_total Transitions of an upstream's circuit breaker, by upstream and the states it went from and to.
# TYPE floodgate_outbound_breaker_transitions_total counter
floodgate_outbound_breaker_transitions_total{from="closed",to="open",upstream="partner"} 1
`, "floodgate_outbound_pauses_total", "floodgate_outbound_retries_total", "floodgate_outbound_breaker_state",
		"floodgate_outbound_breaker_transitions_total")

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if !strings.Contains(body, `floodgate_outbound_wait_seconds_count{cause="pause",upstream="partner"} 1`) {
		t.Errorf("/metrics has no pause wait:\n%s", body)
	}
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// Upstream names past MaxUpstreams share OtherUpstream's series.
func TestOutboundMaxUpstreams(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewOutbound(reg, metrics.OutboundOptions{MaxUpstreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, up := range []string{"a", "b", "c", "d", "a"} {
		m.Retried(up, 429)
	}
	m.Retried("x", 1000)
	compare(t, reg, `
# HELP floodgate_outbound_retries_total Refused outbound requests sent again, by upstream and the refusal's status code.
# TYPE floodgate_outbound_retries_total counter
floodgate_outbound_retries_total{code="429",upstream="a"} 2
floodgate_outbound_retries_total{code="429",upstream="b"} 1
floodgate_outbound_retries_total{code="429",upstream="other"} 2
floodgate_outbound_retries_total{code="invalid",upstream="other"} 1
`, "floodgate_outbound_retries_total")
}

func TestOutboundOptionErrors(t *testing.T) {
	for _, o := range []metrics.OutboundOptions{{MaxUpstreams: -1}, {Buckets: []float64{}}, {Buckets: []float64{1, 1}}} {
		if _, err := metrics.NewOutbound(prometheus.NewRegistry(), o); err == nil {
			t.Errorf("NewOutbound(%+v) = nil error", o)
		}
	}
	if _, err := metrics.NewOutbound(nil, metrics.OutboundOptions{}); err == nil {
		t.Error("NewOutbound(nil) = nil error")
	}
}
