package telemetry

import (
	"net/http"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestOffIsNothing: without a telemetry section New gives nil, and a nil
// Telemetry's wrappers return what they were given, so the request path
// has nothing of OpenTelemetry on it.
func TestOffIsNothing(t *testing.T) {
	tel, err := New(nil, nil, nil)
	if err != nil || tel != nil {
		t.Fatalf("New(nil) = %v, %v; want nil, nil", tel, err)
	}
	lim, err := floodgate.New(memstore.New(memstore.Options{}), floodgate.Policy{Name: "api", Limits: []floodgate.Limit{{Rate: 1, Period: 1e9}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := tel.Limiter(lim, true); got != lim {
		t.Errorf("Limiter wrapped the limiter with telemetry off")
	}
	h := http.NotFoundHandler()
	if got := tel.HTTP("proxy", h, true); got == nil || http.Handler(got) == nil {
		t.Fatal("HTTP returned nil")
	} else if _, ok := got.(interface {
		ServeHTTP(http.ResponseWriter, *http.Request)
	}); !ok {
		t.Fatal("not a handler")
	}
	if opts := tel.GRPC(); opts != nil {
		t.Errorf("GRPC() = %v with telemetry off", opts)
	}
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Error(err)
	}
}

// TestName: OpenTelemetry's names and units of the Prometheus metrics.
func TestName(t *testing.T) {
	for prom, want := range map[string][2]string{
		"floodgate_decisions_total":                              {"floodgate.decisions", "{decision}"},
		"floodgate_decision_duration_seconds":                    {"floodgate.decision.duration", "s"},
		"floodgate_engine_errors_total":                          {"floodgate.engine_errors", ""},
		"floodgate_breaker_state":                                {"floodgate.breaker_state", ""},
		"floodgate_outbound_wait_seconds":                        {"floodgate.outbound_wait", "s"},
		"floodgate_config_last_reload_success_timestamp_seconds": {"floodgate.config_last_reload_success_timestamp", "s"},
		"floodgate_pg_bytes_total":                               {"floodgate.pg.io", "By"},
		"go_goroutines":                                          {"go_goroutines", ""},
	} {
		if name, unit := Name(prom); name != want[0] || unit != want[1] {
			t.Errorf("Name(%s) = %s, %q; want %s, %q", prom, name, unit, want[0], want[1])
		}
	}
}
