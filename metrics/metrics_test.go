package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
)

// memStore returns a memory store on a pinned clock that t closes.
func memStore(t testing.TB, o memstore.Options) *memstore.Store {
	t.Helper()
	if o.Clock == nil {
		o.Clock = floodgatetest.NewClock(floodgatetest.Start)
	}
	o.SweepInterval = -1
	s := memstore.New(o)
	t.Cleanup(func() { s.Close() })
	return s
}

func newLimiter(t testing.TB, s floodgate.Store, name string, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	l, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newMetrics(t testing.TB, o metrics.Options) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, o)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// compare checks the named metrics of reg against the exposition text want.
func compare(t *testing.T, reg prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

const decisionsHelp = `# HELP floodgate_decisions_total Decisions that charged units (cost > 0), by policy, decision (allowed, denied, error) and the source that decided.
# TYPE floodgate_decisions_total counter
`

const peeksHelp = `# HELP floodgate_peeks_total Decisions with cost 0, which charge nothing, by policy, decision and source.
# TYPE floodgate_peeks_total counter
`

func TestDecisionsCounted(t *testing.T) {
	ctx := context.Background()
	m, reg := newMetrics(t, metrics.Options{})
	lim := m.Limiter(newLimiter(t, memStore(t, memstore.Options{}), "api", floodgate.PerSecond(3)))

	for i, want := range []bool{true, true, true, false, false} {
		res, err := floodgate.Allow(ctx, lim, "user:1")
		if err != nil || res.Allowed != want {
			t.Fatalf("request %d: allowed %v, %v; want %v", i+1, res.Allowed, err, want)
		}
	}
	if res, err := lim.AllowN(ctx, "user:2", 2); err != nil || !res.Allowed {
		t.Fatalf("AllowN(2) on a fresh key: %+v, %v", res, err)
	}
	if res, err := lim.AllowN(ctx, "user:1", 0); err != nil || !res.Allowed || res.Remaining != 0 {
		t.Fatalf("peek of a spent key: %+v, %v; want allowed with nothing remaining", res, err)
	}
	if _, err := lim.AllowN(ctx, "user:1", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Fatalf("negative cost: %v; want ErrInvalidCost", err)
	}
	if res, err := lim.AllowN(ctx, "user:3", 4); err != nil || res.Allowed || res.Source != floodgate.SourcePolicy {
		t.Fatalf("cost above capacity: %+v, %v; want denied by the policy", res, err)
	}

	compare(t, reg, decisionsHelp+`
floodgate_decisions_total{decision="allowed",policy="api",source="memory"} 4
floodgate_decisions_total{decision="denied",policy="api",source="memory"} 2
floodgate_decisions_total{decision="error",policy="api",source="memory"} 0
floodgate_decisions_total{decision="allowed",policy="api",source="none"} 0
floodgate_decisions_total{decision="denied",policy="api",source="none"} 0
floodgate_decisions_total{decision="error",policy="api",source="none"} 1
floodgate_decisions_total{decision="allowed",policy="api",source="policy"} 0
floodgate_decisions_total{decision="denied",policy="api",source="policy"} 1
floodgate_decisions_total{decision="error",policy="api",source="policy"} 0
`+peeksHelp+`
floodgate_peeks_total{decision="allowed",policy="api",source="memory"} 1
floodgate_peeks_total{decision="denied",policy="api",source="memory"} 0
floodgate_peeks_total{decision="error",policy="api",source="memory"} 0
floodgate_peeks_total{decision="allowed",policy="api",source="none"} 0
floodgate_peeks_total{decision="denied",policy="api",source="none"} 0
floodgate_peeks_total{decision="error",policy="api",source="none"} 0
floodgate_peeks_total{decision="allowed",policy="api",source="policy"} 0
floodgate_peeks_total{decision="denied",policy="api",source="policy"} 0
floodgate_peeks_total{decision="error",policy="api",source="policy"} 0
`, "floodgate_decisions_total", "floodgate_peeks_total")

	// Every call, peeks and errors included, is one latency observation.
	if n := histogramCount(t, reg, "api"); n != 9 {
		t.Errorf("latency observations: %d; want 9", n)
	}
}

// histogramCount returns the sample count of the latency histogram of
// policy.
func histogramCount(t *testing.T, reg prometheus.Gatherer, policy string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decision_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "policy" && lp.GetValue() == policy {
					h := mt.GetHistogram()
					if got := len(h.GetBucket()); got != len(metrics.DefaultBuckets()) {
						t.Errorf("histogram has %d buckets; want %d", got, len(metrics.DefaultBuckets()))
					}
					return h.GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("no latency histogram for policy %q", policy)
	return 0
}

func TestNoLabelIsAKey(t *testing.T) {
	ctx := context.Background()
	m, reg := newMetrics(t, metrics.Options{})
	s := memStore(t, memstore.Options{})
	if err := m.WatchMemory("memory", s); err != nil {
		t.Fatal(err)
	}
	lims := []floodgate.Limiter{
		m.Limiter(newLimiter(t, s, "api", floodgate.PerSecond(2))),
		m.Limiter(newLimiter(t, s, "login", floodgate.PerMinute(5))),
	}
	keys := map[string]bool{}
	for i := range 200 {
		key := fmt.Sprintf("user:%d", i%50)
		keys[key] = true
		for _, l := range lims {
			if _, err := l.AllowN(ctx, key, int64(i%3)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			series++
			for _, lp := range mt.GetLabel() {
				if keys[lp.GetValue()] || strings.HasPrefix(lp.GetValue(), "user:") {
					t.Errorf("%s has a key as label %s=%q", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	// 2 policies × 2 counters × 3 decisions × 1 source, 2 histograms, 2
	// memory series: the count follows policies, not keys.
	if want := 2*2*3 + 2 + 2; series != want {
		t.Errorf("%d series after 50 keys; want %d", series, want)
	}
}

func TestPolicyLabelsBounded(t *testing.T) {
	ctx := context.Background()
	m, reg := newMetrics(t, metrics.Options{MaxPolicies: 3})
	s := memStore(t, memstore.Options{})
	for i := range 6 {
		name := fmt.Sprintf("plan-%d", i)
		lim := m.Limiter(newLimiter(t, s, name, floodgate.PerSecond(10)))
		if lim.Name() != name {
			t.Fatalf("wrapped Name() = %q; want %q", lim.Name(), name)
		}
		if _, err := floodgate.Allow(ctx, lim, "k"); err != nil {
			t.Fatal(err)
		}
	}
	compare(t, reg, decisionsHelp+`
floodgate_decisions_total{decision="allowed",policy="plan-0",source="memory"} 1
floodgate_decisions_total{decision="denied",policy="plan-0",source="memory"} 0
floodgate_decisions_total{decision="error",policy="plan-0",source="memory"} 0
floodgate_decisions_total{decision="allowed",policy="plan-1",source="memory"} 1
floodgate_decisions_total{decision="denied",policy="plan-1",source="memory"} 0
floodgate_decisions_total{decision="error",policy="plan-1",source="memory"} 0
floodgate_decisions_total{decision="allowed",policy="plan-2",source="memory"} 1
floodgate_decisions_total{decision="denied",policy="plan-2",source="memory"} 0
floodgate_decisions_total{decision="error",policy="plan-2",source="memory"} 0
floodgate_decisions_total{decision="allowed",policy="other",source="memory"} 3
floodgate_decisions_total{decision="denied",policy="other",source="memory"} 0
floodgate_decisions_total{decision="error",policy="other",source="memory"} 0
`, "floodgate_decisions_total")
}

func TestWrapping(t *testing.T) {
	ctx := context.Background()
	m, reg := newMetrics(t, metrics.Options{})
	base := newLimiter(t, memStore(t, memstore.Options{}), "api", floodgate.PerSecond(5))

	if m.Limiter(nil) != nil {
		t.Error("Limiter(nil) is not nil")
	}
	w := m.Limiter(base)
	if again := m.Limiter(w); again != w {
		t.Error("wrapping a wrapped limiter again made a second wrapper, which counts twice")
	}
	u, ok := w.(interface{ Unwrap() floodgate.Limiter })
	if !ok || u.Unwrap() != floodgate.Limiter(base) {
		t.Fatal("the wrapper does not Unwrap to the limiter it wraps")
	}

	// Every method reaches the wrapped limiter's state.
	for range 5 {
		if _, err := floodgate.Allow(ctx, w, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.RefundN(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	if res, _ := base.AllowN(ctx, "k", 0); res.Remaining != 2 {
		t.Errorf("after 5 charges and a refund of 2 through the wrapper: %d remaining; want 2", res.Remaining)
	}
	if err := w.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res, _ := base.AllowN(ctx, "k", 0); res.Remaining != 5 {
		t.Errorf("after Reset through the wrapper: %d remaining; want 5", res.Remaining)
	}
	if v := testutil.ToFloat64(counter(t, reg, "api", "allowed", "memory")); v != 5 {
		t.Errorf("allowed decisions counted: %v; want 5 (refunds and resets are not decisions)", v)
	}

	// Another Metrics wraps on top: each counts once.
	m2, reg2 := newMetrics(t, metrics.Options{})
	if _, err := floodgate.Allow(ctx, m2.Limiter(w), "k"); err != nil {
		t.Fatal(err)
	}
	if a, b := testutil.ToFloat64(counter(t, reg, "api", "allowed", "memory")), testutil.ToFloat64(counter(t, reg2, "api", "allowed", "memory")); a != 6 || b != 1 {
		t.Errorf("two Metrics over one limiter counted %v and %v; want 6 and 1", a, b)
	}
}

// counter returns a collector for one decisions_total series of reg, for
// testutil.ToFloat64.
func counter(t *testing.T, reg prometheus.Gatherer, policy, decision, source string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mt.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["policy"] == policy && l["decision"] == decision && l["source"] == source {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, mt.GetCounter().GetValue)
			}
		}
	}
	t.Fatalf("no floodgate_decisions_total{policy=%q,decision=%q,source=%q}", policy, decision, source)
	return nil
}

func TestBadInput(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, tc := range map[string]struct {
		reg prometheus.Registerer
		o   metrics.Options
	}{
		"nil registerer":    {nil, metrics.Options{}},
		"negative policies": {reg, metrics.Options{MaxPolicies: -1}},
		"empty buckets":     {reg, metrics.Options{Buckets: []float64{}}},
		"unordered buckets": {reg, metrics.Options{Buckets: []float64{0.1, 0.01}}},
		"equal buckets":     {reg, metrics.Options{Buckets: []float64{0.1, 0.1}}},
		"const label clash": {reg, metrics.Options{ConstLabels: prometheus.Labels{"policy": "x"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if m, err := metrics.New(tc.reg, tc.o); err == nil || m != nil {
				t.Fatalf("New: %v, %v; want an error", m, err)
			}
		})
	}

	if _, err := metrics.New(reg, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, metrics.Options{}); err == nil {
		t.Error("a second Metrics on one registry: no error")
	}
	if _, err := metrics.New(reg, metrics.Options{ConstLabels: prometheus.Labels{"listener": "b"}}); err == nil {
		t.Error("a second Metrics on one registry with other const labels: no error, but their series would clash")
	}
}

func TestLabelValuesNotUTF8(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{})
	s := memStore(t, memstore.Options{})
	lim := m.Limiter(newLimiter(t, s, "bad\xffname", floodgate.PerSecond(1)))
	if _, err := floodgate.Allow(context.Background(), lim, "k"); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemory("mem\xff", s); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather with non-UTF-8 names: %v", err)
	}
	compare(t, reg, decisionsHelp+`
floodgate_decisions_total{decision="allowed",policy="bad`+"\uFFFD"+`name",source="memory"} 1
floodgate_decisions_total{decision="denied",policy="bad`+"\uFFFD"+`name",source="memory"} 0
floodgate_decisions_total{decision="error",policy="bad`+"\uFFFD"+`name",source="memory"} 0
`, "floodgate_decisions_total")
}

// sourceMaker is a Limiter whose every answer names a source of its own,
// as an engine that built sources from request data would.
type sourceMaker struct {
	floodgate.Limiter
	n int
}

func (s *sourceMaker) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	s.n++
	return floodgate.Result{Allowed: true, Source: floodgate.Source(fmt.Sprintf("src-%d", s.n)), Policy: s.Name()}, nil
}

func TestSourceLabelsBounded(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{})
	lim := m.Limiter(&sourceMaker{Limiter: newLimiter(t, memStore(t, memstore.Options{}), "api", floodgate.PerSecond(1))})
	for range 40 {
		if _, err := floodgate.Allow(context.Background(), lim, "k"); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var src, dec string
			for _, lp := range mt.GetLabel() {
				switch lp.GetName() {
				case "source":
					src = lp.GetValue()
				case "decision":
					dec = lp.GetValue()
				}
			}
			if dec == "allowed" {
				sources[src] = mt.GetCounter().GetValue()
			}
		}
	}
	if len(sources) != 17 || sources["other"] != 24 || sources["src-1"] != 1 || sources["src-16"] != 1 {
		t.Errorf("allowed decisions by source: %v; want src-1 … src-16 once each and 24 under other", sources)
	}
}

// TestRetainDropsGonePolicies: after a reload without policy "old", its
// series are gone and its name no longer counts towards MaxPolicies.
func TestRetainDropsGonePolicies(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxPolicies: 2})
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	wrap := func(name string) floodgate.Limiter {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
		if err != nil {
			t.Fatal(err)
		}
		return m.Limiter(lim)
	}
	ctx := context.Background()
	floodgate.Allow(ctx, wrap("old"), "k")
	floodgate.Allow(ctx, wrap("kept"), "k")
	m.Retain([]string{"kept"})
	floodgate.Allow(ctx, wrap("new"), "k")
	got, err := testutil.GatherAndCount(reg, "floodgate_decisions_total")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := reg.Gather()
	for _, mf := range text {
		for _, mm := range mf.GetMetric() {
			for _, lp := range mm.GetLabel() {
				if lp.GetName() == "policy" && (lp.GetValue() == "old" || lp.GetValue() == metrics.OtherPolicy) {
					t.Errorf("%s still has a series for policy %q", mf.GetName(), lp.GetValue())
				}
			}
		}
	}
	if got == 0 {
		t.Error("no decisions counted at all")
	}
}
