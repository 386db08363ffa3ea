package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/testkit"
)

func TestLeaseMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewLease(reg, metrics.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	s, err := lease.New(mem, lease.Options{Observer: m, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(s)
	// A limit far above what the test decides: a key that ran out would
	// never get a block. Decisions come in bursts, with the store's
	// background refill given time between them.
	set, err := floodgatetest.NewSet("api", "", floodgate.Limit{Rate: 1_000_000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a block held for the hot key", func() bool {
		for range 50 {
			if _, err := s.Decide(context.Background(), set, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
		return s.Held() > 0
	})
	// A refill started by the last decisions may land after the gauge is
	// read: with no more decisions none starts, and the two agree.
	testkit.Eventually(t, 10*time.Second, "the held gauge to show what the store holds", func() bool {
		held := gauge(t, reg, "floodgate_lease_held_units")
		return held > 0 && held == float64(s.Held())
	})
	s.Close()
	if held := gauge(t, reg, "floodgate_lease_held_units"); held != 0 {
		t.Fatalf("held gauge %g after Close", held)
	}
	if n := testutil.ToFloat64(prometheusCounter(t, reg, "floodgate_lease_refunded_units_total")); n <= 0 {
		t.Fatalf("refunded %g units after Close; want the unused ones", n)
	}
	if n, err := testutil.GatherAndCount(reg, "floodgate_lease_size_units"); err != nil || n != 1 {
		t.Fatalf("lease size series: %d, %v", n, err)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// prometheusCounter returns the single series of a counter family as a
// collector testutil can read.
func prometheusCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return f.GetMetric()[0].GetCounter().GetValue() })
		}
	}
	t.Fatalf("no %s", name)
	return nil
}
