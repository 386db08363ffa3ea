package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
)

// middleware builds the same two rules (a two-limit policy with a tier per
// user, and a per-address policy picked per request) over store, each
// limiter passed through wrap.
func middleware(t *testing.T, store floodgate.Store, wrap func(floodgate.Limiter) floodgate.Limiter) *httplimit.Middleware {
	t.Helper()
	api, err := floodgate.New(store, floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{floodgate.PerSecond(3), floodgate.PerHour(10)},
		Tiers:  map[string][]floodgate.Limit{"gold": {floodgate.PerSecond(5)}},
		TierOf: func(key string) string {
			if strings.HasSuffix(key, "gold") {
				return "gold"
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ip := wrap(floodgatetest.NewLimiter(t, store, "ip", floodgate.PerMinute(4)))
	m, err := httplimit.New(httplimit.Config{
		Rules: []httplimit.Rule{
			{Limiter: wrap(api), Key: httplimit.KeyByHeader("X-User", nil)},
			{LimiterFor: func(r *http.Request) floodgate.Limiter {
				if r.Header.Get("X-Exempt") != "" {
					return nil
				}
				return ip
			}},
		},
		Headers: httplimit.Headers{Source: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHTTPHeadersUnchanged serves the same requests through middleware
// over plain limiters and over wrapped ones, on two stores at one pinned
// time, and requires identical responses: every header (RateLimit-Policy
// included), status and body.
func TestHTTPHeadersUnchanged(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	plainStore := memStore(t, memstore.Options{Clock: clock})
	wrappedStore := memStore(t, memstore.Options{Clock: clock})
	m, reg := newMetrics(t, metrics.Options{})

	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	plain := middleware(t, plainStore, func(l floodgate.Limiter) floodgate.Limiter { return l }).Handler(ok)
	wrapped := middleware(t, wrappedStore, m.Limiter).Handler(ok)

	type req struct {
		remote, user, exempt string
		advance              time.Duration
	}
	reqs := []req{
		{remote: "192.0.2.1:1000", user: "alice"},
		{remote: "192.0.2.1:1000", user: "alice"},
		{remote: "192.0.2.1:1000", user: "alice"},
		{remote: "192.0.2.1:1000", user: "alice"}, // api denies
		{remote: "192.0.2.2:1000", user: "bob-gold"},
		{remote: "192.0.2.2:1000", user: "bob-gold", exempt: "1"},
		{remote: "192.0.2.1:1000", user: "carol"},
		{remote: "192.0.2.1:1000", user: "dave"},                             // ip denies
		{remote: "192.0.2.1:1000", user: "alice", advance: 15 * time.Second}, // one unit back under both,
		{remote: "192.0.2.3:1000", advance: time.Minute},
	}
	statuses := map[int]int{}
	for i, r := range reqs {
		clock.Advance(r.advance)
		var recs [2]*httptest.ResponseRecorder
		for j, h := range []http.Handler{plain, wrapped} {
			hr := httptest.NewRequest("GET", "/", nil)
			hr.RemoteAddr = r.remote
			if r.user != "" {
				hr.Header.Set("X-User", r.user)
			}
			if r.exempt != "" {
				hr.Header.Set("X-Exempt", r.exempt)
			}
			recs[j] = httptest.NewRecorder()
			h.ServeHTTP(recs[j], hr)
		}
		p, w := recs[0], recs[1]
		if p.Code != w.Code || p.Body.String() != w.Body.String() || !reflect.DeepEqual(p.Header(), w.Header()) {
			t.Errorf("request %d: plain %d %v %q, wrapped %d %v %q", i+1, p.Code, p.Header(), p.Body, w.Code, w.Header(), w.Body)
		}
		if p.Header().Get("RateLimit-Policy") == "" {
			t.Errorf("request %d: no RateLimit-Policy, so the comparison shows little", i+1)
		}
		statuses[p.Code]++
	}
	if statuses[http.StatusTooManyRequests] != 2 {
		t.Errorf("%d responses were 429; the sequence is built for 2", statuses[http.StatusTooManyRequests])
	}

	compare(t, reg, decisionsHelp+`
floodgate_decisions_total{decision="allowed",policy="api",source="memory"} 9
floodgate_decisions_total{decision="denied",policy="api",source="memory"} 1
floodgate_decisions_total{decision="error",policy="api",source="memory"} 0
floodgate_decisions_total{decision="allowed",policy="ip",source="memory"} 7
floodgate_decisions_total{decision="denied",policy="ip",source="memory"} 1
floodgate_decisions_total{decision="error",policy="ip",source="memory"} 0
`, "floodgate_decisions_total")
}

// TestHTTPDuplicateNames: httplimit refuses two rules of one policy name,
// and wrapping does not hide the name from it.
func TestHTTPDuplicateNames(t *testing.T) {
	m, _ := newMetrics(t, metrics.Options{})
	s := memStore(t, memstore.Options{})
	a := floodgatetest.NewLimiter(t, s, "api", floodgate.PerSecond(1))
	b := floodgatetest.NewLimiter(t, s, "api", floodgate.PerSecond(2))
	for name, pair := range map[string][2]floodgate.Limiter{
		"both wrapped":   {m.Limiter(a), m.Limiter(b)},
		"one wrapped":    {a, m.Limiter(b)},
		"the same twice": {m.Limiter(a), m.Limiter(a)},
	} {
		_, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: pair[0]}, {Limiter: pair[1]}}})
		if err == nil || !strings.Contains(err.Error(), `"api"`) {
			t.Errorf("%s: %v; want the duplicate policy name refused", name, err)
		}
	}
}
