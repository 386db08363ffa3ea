package otel

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// receiver is the OpenTelemetry Collector's OTLP receiver, in process, on
// a loopback port, with sinks that keep what arrives.
type receiver struct {
	addr    string // host:port
	metrics *consumertest.MetricsSink
	traces  *consumertest.TracesSink
}

// startReceiver starts the OTLP receiver for protocol (grpc or http).
func startReceiver(t *testing.T, protocol string) *receiver {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	r := &receiver{addr: freeAddr(t), metrics: new(consumertest.MetricsSink), traces: new(consumertest.TracesSink)}
	switch protocol {
	case "grpc":
		cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = r.addr
	case "http":
		cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = r.addr
	}
	set := receivertest.NewNopSettings(f.Type())
	ctx := context.Background()
	mr, err := f.CreateMetrics(ctx, set, cfg, r.metrics)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := f.CreateTraces(ctx, set, cfg, r.traces)
	if err != nil {
		t.Fatal(err)
	}
	// The factory shares one receiver between both (by configuration):
	// the first Start serves both signals, the second does nothing.
	if err := mr.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mr.Shutdown(ctx)
		_ = tr.Shutdown(ctx)
	})
	return r
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// upstream records the traceparent of every request it gets.
type upstream struct {
	mu     sync.Mutex
	parent []string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.parent = append(u.parent, r.Header.Get("Traceparent"))
	u.mu.Unlock()
	w.Write([]byte("ok"))
}

// The client's trace: every request the test sends is in it.
const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// TestExportGRPC: floodgate serve with a proxy, a check API and an Envoy
// rate limit service, exporting over OTLP/gRPC to the Collector's receiver.
// After 8 proxied requests from one address, 7 checks of one key and 3 Envoy
// calls under a limit of 5 a minute, the receiver holds (after floodgate
// stops, which exports what is left) the decision counters with OTel names
// and units and the Prometheus values, http.server.request.duration for the
// proxy, a server span per request continuing the client's trace, a decision
// span under it with the policy, decision, source and (raw_keys) the key,
// and the upstream saw floodgate's server span as its parent.
func TestExportGRPC(t *testing.T) {
	rcv := startReceiver(t, "grpc")
	up := &upstream{}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	dir := t.TempDir()
	rl := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(rl, []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 2}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := serve(t, dir, fmt.Sprintf(`
policies:
  api: {rate: 5/min}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes: [{limits: [{policy: api, key: ip}]}]
check: {listen: 127.0.0.1:0}
envoy:
  listen: 127.0.0.1:0
  ratelimit_config: [%q]
admin: {listen: 127.0.0.1:0, raw_keys: true}
log: {format: json}
telemetry:
  endpoint: %s
  insecure: true
  service_name: floodgate-test
  resource_attributes: {deployment.environment.name: test}
  metrics_interval: 1h
`, upSrv.URL, rl, rcv.addr), 4)

	for i := range 8 {
		req, _ := http.NewRequest("GET", "http://"+d.addrs["proxy"]+"/x", nil)
		req.Header.Set("Traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i < 5]; resp.StatusCode != want {
			t.Fatalf("proxied request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	for i := range 7 {
		req, _ := http.NewRequest("POST", "http://"+d.addrs["check"]+"/v1/check", strings.NewReader(`{"policy":"api","key":"alice"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i < 5]; resp.StatusCode != want {
			t.Fatalf("check %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	conn, err := grpc.NewClient(d.addrs["envoy"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		want := map[bool]rlsv3.RateLimitResponse_Code{true: rlsv3.RateLimitResponse_OK, false: rlsv3.RateLimitResponse_OVER_LIMIT}[i < 2]
		if err != nil || resp.OverallCode != want {
			t.Fatalf("envoy call %d: %v, %v; want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	d.stop(t)

	// Metrics: the last export holds the counters' final values.
	m := lastMetrics(t, rcv)
	if got := resourceAttr(m.ResourceMetrics(), "service.name"); got != "floodgate-test" {
		t.Errorf("service.name = %q", got)
	}
	if got := resourceAttr(m.ResourceMetrics(), "deployment.environment.name"); got != "test" {
		t.Errorf("deployment.environment.name = %q", got)
	}
	dec := find(t, m, "floodgate.decisions")
	if dec.Unit() != "{decision}" || dec.Type() != pmetric.MetricTypeSum || !dec.Sum().IsMonotonic() {
		t.Errorf("floodgate.decisions: unit %q, type %v", dec.Unit(), dec.Type())
	}
	for _, c := range []struct {
		decision string
		want     float64
	}{{"allowed", 10}, {"denied", 5}} {
		if got := sumWhere(dec.Sum().DataPoints(), map[string]string{"policy": "api", "decision": c.decision, "source": "memory"}); got != c.want {
			t.Errorf("floodgate.decisions{policy=api, decision=%s, source=memory} = %v, want %v", c.decision, got, c.want)
		}
	}
	dur := find(t, m, "floodgate.decision.duration")
	if dur.Unit() != "s" || dur.Type() != pmetric.MetricTypeHistogram {
		t.Errorf("floodgate.decision.duration: unit %q, type %v", dur.Unit(), dur.Type())
	} else {
		var n uint64
		for i := range dur.Histogram().DataPoints().Len() {
			if p := dur.Histogram().DataPoints().At(i); attr(p.Attributes(), "policy") == "api" {
				n += p.Count()
			}
		}
		if n < 15 {
			t.Errorf("floodgate.decision.duration{policy=api} counts %d decisions, want at least the 15 charged", n)
		}
	}
	if h := find(t, m, "http.server.request.duration"); h.Unit() != "s" {
		t.Errorf("http.server.request.duration: unit %q", h.Unit())
	}
	for _, name := range []string{"floodgate.config_reloads", "floodgate.build_info"} {
		find(t, m, name)
	}
	if _, ok := findMetric(m, "go_goroutines"); ok {
		t.Error("the Go runtime's Prometheus families are exported; only floodgate_* should be")
	}

	// Traces.
	spans := allSpans(rcv)
	byID := map[pcommon.SpanID]ptrace.Span{}
	for _, s := range spans {
		byID[s.SpanID()] = s
	}
	var decisions []ptrace.Span
	for _, s := range spans {
		if s.TraceID().String() != clientTrace {
			t.Errorf("span %s is in trace %s, not the client's", s.Name(), s.TraceID())
		}
		if s.Name() == "floodgate.decide" {
			decisions = append(decisions, s)
		}
	}
	count := map[string]int{}
	for _, s := range decisions {
		parent, ok := byID[s.ParentSpanID()]
		if !ok {
			t.Errorf("decision span %v has no parent among the exported spans", s.Attributes().AsRaw())
			continue
		}
		if parent.Kind() != ptrace.SpanKindServer || parent.ParentSpanID().String() != clientSpan {
			t.Errorf("decision span's parent %s (kind %v) is not a server span under the client's", parent.Name(), parent.Kind())
		}
		a := s.Attributes()
		if attr(a, "floodgate.cost") == "0" {
			continue
		}
		front := "proxy"
		switch {
		case attr(parent.Attributes(), "url.path") == "/v1/check":
			front = "check"
		case strings.Contains(parent.Name(), "ShouldRateLimit"):
			front = "envoy"
		}
		count[front+"/"+attr(a, "floodgate.policy")+"/"+attr(a, "floodgate.decision")+"/"+attr(a, "floodgate.source")+"/"+attr(a, "floodgate.key")]++
	}
	want := map[string]int{
		"proxy/api/allowed/memory/127.0.0.1": 5, "proxy/api/denied/memory/127.0.0.1": 3,
		"check/api/allowed/memory/alice": 5, "check/api/denied/memory/alice": 2,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d decision spans %s, want %d (all: %v)", count[k], k, n, count)
		}
	}
	var envoy int
	for k, n := range count {
		if strings.HasPrefix(k, "envoy/") {
			envoy += n
		}
	}
	if envoy < 3 {
		t.Errorf("%d envoy decision spans, want at least 3 (all: %v)", envoy, count)
	}

	// Propagation: the upstream's parent is floodgate's proxy server span,
	// in the client's trace.
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.parent) != 5 {
		t.Fatalf("the upstream got %d requests, want 5", len(up.parent))
	}
	for _, tp := range up.parent {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != clientTrace {
			t.Errorf("upstream traceparent %q is not in the client's trace", tp)
			continue
		}
		s, ok := byID[spanID(t, parts[2])]
		if !ok || s.Kind() != ptrace.SpanKindServer || s.ParentSpanID().String() != clientSpan {
			t.Errorf("upstream traceparent %q: its parent is not floodgate's server span under the client's", tp)
		}
	}
}

// TestExportHTTP: over OTLP/HTTP, with raw_keys off and traces only at a
// sampling ratio of 0 for new traces: a request in a sampled trace is still
// traced (parent-based), its key is the logs' stand-in, and a request
// without a trace makes no span.
func TestExportHTTP(t *testing.T) {
	rcv := startReceiver(t, "http")
	d := serve(t, t.TempDir(), fmt.Sprintf(`
policies:
  api: {rate: 5/min}
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {format: json}
telemetry:
  endpoint: http://%s
  protocol: http
  signals: [traces]
  sampling_ratio: 0
`, rcv.addr), 2)
	for _, tp := range []string{traceparent, ""} {
		req, _ := http.NewRequest("POST", "http://"+d.addrs["check"]+"/v1/check", strings.NewReader(`{"policy":"api","key":"alice"}`))
		req.Header.Set("Content-Type", "application/json")
		if tp != "" {
			req.Header.Set("Traceparent", tp)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	d.stop(t)
	if n := len(rcv.metrics.AllMetrics()); n != 0 {
		t.Errorf("%d metric exports with signals [traces]", n)
	}
	var decisions int
	for _, s := range allSpans(rcv) {
		if s.TraceID().String() != clientTrace {
			t.Errorf("span %s in trace %s: a trace started here at ratio 0 was sampled", s.Name(), s.TraceID())
		}
		if s.Name() == "floodgate.decide" && attr(s.Attributes(), "floodgate.cost") != "0" {
			decisions++
			if k := attr(s.Attributes(), "floodgate.key"); !strings.HasPrefix(k, "k:") {
				t.Errorf("key %q without raw_keys, want the redacted stand-in", k)
			}
		}
	}
	if decisions != 1 {
		t.Errorf("%d decision spans, want 1", decisions)
	}
}

func lastMetrics(t *testing.T, r *receiver) pmetric.Metrics {
	t.Helper()
	all := r.metrics.AllMetrics()
	if len(all) == 0 {
		t.Fatal("no metrics arrived")
	}
	return all[len(all)-1]
}

func findMetric(m pmetric.Metrics, name string) (pmetric.Metric, bool) {
	for i := range m.ResourceMetrics().Len() {
		sms := m.ResourceMetrics().At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				if ms.At(k).Name() == name {
					return ms.At(k), true
				}
			}
		}
	}
	return pmetric.Metric{}, false
}

func find(t *testing.T, m pmetric.Metrics, name string) pmetric.Metric {
	t.Helper()
	x, ok := findMetric(m, name)
	if !ok {
		var names []string
		for i := range m.ResourceMetrics().Len() {
			sms := m.ResourceMetrics().At(i).ScopeMetrics()
			for j := range sms.Len() {
				for k := range sms.At(j).Metrics().Len() {
					names = append(names, sms.At(j).Metrics().At(k).Name())
				}
			}
		}
		t.Errorf("no metric %s among %v", name, names)
	}
	return x
}

func sumWhere(ps pmetric.NumberDataPointSlice, where map[string]string) float64 {
	var v float64
	for i := range ps.Len() {
		p := ps.At(i)
		match := true
		for k, want := range where {
			match = match && attr(p.Attributes(), k) == want
		}
		if match {
			v += p.DoubleValue() + float64(p.IntValue())
		}
	}
	return v
}

func attr(m pcommon.Map, k string) string {
	v, ok := m.Get(k)
	if !ok {
		return ""
	}
	return v.AsString()
}

func resourceAttr(rms pmetric.ResourceMetricsSlice, k string) string {
	if rms.Len() == 0 {
		return ""
	}
	return attr(rms.At(0).Resource().Attributes(), k)
}

func allSpans(r *receiver) []ptrace.Span {
	var out []ptrace.Span
	for _, td := range r.traces.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			ss := td.ResourceSpans().At(i).ScopeSpans()
			for j := range ss.Len() {
				for k := range ss.At(j).Spans().Len() {
					out = append(out, ss.At(j).Spans().At(k))
				}
			}
		}
	}
	return out
}

func spanID(t *testing.T, s string) pcommon.SpanID {
	t.Helper()
	var id pcommon.SpanID
	if b, err := hex.DecodeString(s); err != nil || len(b) != len(id) {
		t.Fatalf("span id %q", s)
	} else {
		copy(id[:], b)
	}
	return id
}

// daemon is a running floodgate serve.
type daemon struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	logs  strings.Builder
	addrs map[string]string
	done  chan struct{}
}

// serve runs floodgate serve with the configuration yaml (written in dir)
// and waits until n listeners are bound.
func serve(t *testing.T, dir, yaml string, n int) *daemon {
	t.Helper()
	file := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(floodgate(t), "serve", file)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(s string) bool {
		return strings.HasPrefix(s, "FLOODGATE_") || strings.HasPrefix(s, "OTEL_")
	})
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, addrs: map[string]string{}, done: make(chan struct{})}
	bound := make(chan struct{})
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Listener, Addr string }
			_ = json.Unmarshal(sc.Bytes(), &line)
			d.mu.Lock()
			d.logs.WriteString(sc.Text() + "\n")
			if line.Msg == "listening" {
				d.addrs[line.Listener] = line.Addr
				if len(d.addrs) == n {
					close(bound)
				}
			}
			d.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	select {
	case <-bound:
	case <-time.After(60 * time.Second):
		t.Fatalf("floodgate serve did not bind its %d listeners:\n%s", n, d.logged())
	}
	return d
}

// stop sends SIGTERM and waits for floodgate to exit, having exported
// what was left.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.done
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("floodgate serve after SIGTERM: %v\n%s", err, d.logged())
	}
	if strings.Contains(d.logged(), "export failed") {
		t.Errorf("an export failed:\n%s", d.logged())
	}
}

func (d *daemon) logged() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildOut  []byte
)

// floodgate builds cmd/floodgate from this tree, as a user's build sees
// the module (GOWORK=off), once.
func floodgate(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "floodgate-otel")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "floodgate")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/floodgate")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOWORK=off")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building floodgate: %v\n%s", buildErr, buildOut)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}
