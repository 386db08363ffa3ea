package metrics_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
)

// One line per limiter: wrap it, and serve the registry on /metrics
// (promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
func Example() {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		log.Fatal(err)
	}

	store := memstore.New(memstore.Options{})
	defer store.Close()
	if err := m.WatchMemory("memory", store); err != nil {
		log.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(2)}})
	if err != nil {
		log.Fatal(err)
	}
	counted := m.Limiter(lim)

	for range 3 {
		res, err := floodgate.Allow(context.Background(), counted, "user:42")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("allowed:", res.Allowed)
	}

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP floodgate_decisions_total Decisions that charged units (cost > 0), by policy, decision (allowed, denied, error) and the source that decided.
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{decision="allowed",policy="api",source="memory"} 2
floodgate_decisions_total{decision="denied",policy="api",source="memory"} 1
floodgate_decisions_total{decision="error",policy="api",source="memory"} 0
# HELP floodgate_memory_keys Entries an in-memory engine holds (one per key and limit).
# TYPE floodgate_memory_keys gauge
floodgate_memory_keys{engine="memory"} 1
`), "floodgate_decisions_total", "floodgate_memory_keys")
	fmt.Println("metrics as shown:", err == nil)
	// Output:
	// allowed: true
	// allowed: true
	// allowed: false
	// metrics as shown: true
}
