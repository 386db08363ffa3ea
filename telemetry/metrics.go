package telemetry

import (
	"context"
	"strings"

	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate-go/floodgate/metrics"
)

// Producer returns the metrics of g whose names start floodgate_ as
// OpenTelemetry metrics, converted by OpenTelemetry's Prometheus bridge
// when a reader collects them and renamed by Name. The Go runtime's and the
// process's families are left out: OpenTelemetry has conventions of its
// own for those, and a collector's host metrics cover them.
func Producer(g prometheus.Gatherer) sdkmetric.Producer {
	own := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		fams, err := g.Gather()
		kept := fams[:0]
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), metrics.Namespace+"_") {
				kept = append(kept, f)
			}
		}
		return kept, err
	})
	return renamer{promBridge.NewMetricProducer(promBridge.WithGatherer(own))}
}

type renamer struct{ sdkmetric.Producer }

func (r renamer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	sms, err := r.Producer.Produce(ctx)
	for i := range sms {
		sms[i].Scope.Name = ScopeName
		for j := range sms[i].Metrics {
			m := &sms[i].Metrics[j]
			m.Name, m.Unit = Name(m.Name)
		}
	}
	return sms, err
}

// named are the metrics whose OpenTelemetry names say more than the
// mechanical rule of Name gives.
var named = map[string][2]string{
	"floodgate_decisions_total":           {"floodgate.decisions", "{decision}"},
	"floodgate_peeks_total":               {"floodgate.peeks", "{decision}"},
	"floodgate_decision_duration_seconds": {"floodgate.decision.duration", "s"},
	"floodgate_pg_bytes_total":            {"floodgate.pg.io", "By"},
}

// Name returns the OpenTelemetry name and unit of the Prometheus metric
// named prom: floodgate_ becomes the namespace floodgate., a _total suffix
// goes (OpenTelemetry says monotonic in the instrument's type), and a
// _seconds or _bytes suffix becomes the unit s or By. A few metrics have
// names of their own (floodgate_decision_duration_seconds is
// floodgate.decision.duration, in s).
func Name(prom string) (name, unit string) {
	if n, ok := named[prom]; ok {
		return n[0], n[1]
	}
	rest, ok := strings.CutPrefix(prom, metrics.Namespace+"_")
	if !ok {
		return prom, ""
	}
	rest = strings.TrimSuffix(rest, "_total")
	if r, ok := strings.CutSuffix(rest, "_seconds"); ok {
		rest, unit = r, "s"
	}
	return metrics.Namespace + "." + rest, unit
}
