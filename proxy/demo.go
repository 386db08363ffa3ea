package proxy

import (
	"net/http"
	"strings"
)

// DemoUpstream is a tiny service to put the proxy in front of when there is
// nothing else: `floodgate serve` with no configuration proxies to it, so
// that `curl -i localhost:8080/` shows the rate-limit header fields and,
// once the limit is spent, a 429. It answers every path with a short page,
// or JSON when the client asks for it (Accept: application/json), saying it
// is the demo upstream.
func DemoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			h.Set("Content-Type", "application/json")
			w.Write([]byte(`{"service":"floodgate demo upstream","message":"this request passed the rate limiter"}` + "\n"))
			return
		}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("floodgate demo upstream: this request passed the rate limiter.\n" +
			"Repeat it quickly to see the limit: the X-RateLimit-* and RateLimit fields count down, then 429.\n"))
	})
}
