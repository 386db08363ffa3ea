package daemon

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkProxyDecision is the daemon's decision path as a request meets
// it: the proxy's routing, the middleware with every header field, the
// metrics wrapper and (unless NoStatus) the status recorder, then the
// built-in demo upstream in process, for 1000 client addresses. It prices
// what the status page's recording adds to a request.
func BenchmarkProxyDecision(b *testing.B) {
	for _, tc := range []struct {
		name     string
		noStatus bool
	}{{"status=off", true}, {"status=on", false}} {
		b.Run(tc.name, func(b *testing.B) {
			d, err := New(mustParse(b, `
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
			h := d.cur.Load().proxy
			reqs := make([]*http.Request, 1000)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "http://example.com/", nil)
				reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + ":4711"
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, reqs[i%len(reqs)])
			}
		})
	}
}
