package daemon

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/testkit"
)

// BenchmarkProxyDecision is the daemon's decision path as a request meets
// it: the proxy's routing, the middleware with every header field, the
// metrics wrapper and (unless NoStatus) the status recorder, then the
// built-in demo upstream in process, for 1000 client addresses. It prices
// what the status page's recording adds to a request, and what telemetry
// adds when on (a server span, a decision span, the HTTP server metrics;
// the exporter's endpoint refuses, so spans are made and dropped); off,
// the path is the one without a telemetry section (docs/BENCHMARKS.md).
func BenchmarkProxyDecision(b *testing.B) {
	for _, tc := range []struct {
		name      string
		noStatus  bool
		telemetry string
	}{{"status=off", true, ""}, {"status=on", false, ""},
		{"status=on/telemetry=on", false, "telemetry: {endpoint: 127.0.0.1:1, insecure: true}\n"}} {
		b.Run(tc.name, func(b *testing.B) {
			d, err := New(mustParse(b, tc.telemetry+`
policies:
  api: {rate: 1000000/s}
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  routes:
    - limits: [{policy: api, key: ip}]
admin: {listen: ""}
`), Options{Logger: slog.New(slog.DiscardHandler), NoStatus: tc.noStatus})
			if err != nil {
				b.Fatal(err)
			}
			// As newFrontEnds wraps the proxy: with telemetry off,
			// d.tel.HTTP returns the proxy itself.
			h := d.tel.HTTP("proxy", d.cur.Load().proxy, true)
			b.Cleanup(func() { d.Close() })
			reqs := make([]*http.Request, 1000)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "http://example.com/", nil)
				reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + ":4711"
			}
			b.ReportAllocs()
			// The request is served on this goroutine (the demo upstream
			// is in process), so the thread's CPU time is the request's:
			// cpu-ns/op, which the machine's other load inflates far less
			// than wall time.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0, ok := testkit.ThreadCPU()
			n := 0
			for i := 0; b.Loop(); i++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, reqs[i%len(reqs)])
				n++
			}
			if cpu1, ok1 := testkit.ThreadCPU(); ok && ok1 && n > 0 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(n), "cpu-ns/op")
			}
		})
	}
}
