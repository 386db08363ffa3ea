package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
)

// TestExplain: Explain reports, rule by rule, the limiter, key and cost
// Decide would check, or why the rule leaves the request alone, and
// charges nothing.
func TestExplain(t *testing.T) {
	e := newEnv(t)
	a := e.limiter("a", floodgate.PerMinute(2))
	b := e.limiter("b", floodgate.PerMinute(2))
	c := e.limiter("c", floodgate.PerMinute(2))
	d := e.limiter("d", floodgate.PerMinute(2))
	f := e.limiter("f", floodgate.PerMinute(2))
	mw := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: a, Key: httplimit.KeyByHeader("X-Key", nil), Cost: func(*http.Request) int64 { return 2 }},
		{Limiter: b, Match: httpmatch.Methods("POST")},
		{LimiterFor: func(*http.Request) floodgate.Limiter { return nil }},
		{Limiter: c, Key: func(*http.Request) string { return "" }, SkipNoKey: true},
		{Limiter: d, Key: func(*http.Request) string { return "" }},
		{Limiter: f, Cost: func(*http.Request) int64 { return -1 }},
	}})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-Key", "k")
	var got []httplimit.Planned
	for range 3 {
		got = mw.Explain(r)
	}
	want := []httplimit.Planned{
		{Rule: 0, Limiter: a, Key: "x-key:k", Cost: 2},
		{Rule: 1, Skip: httplimit.SkipNoMatch},
		{Rule: 2, Skip: httplimit.SkipNoLimiter},
		{Rule: 3, Limiter: c, Skip: httplimit.SkipNoKey},
		{Rule: 4, Limiter: d, Key: "nokey:192.0.2.1", Cost: 1},
		{Rule: 5, Limiter: f, Key: "192.0.2.1", Cost: -1, Skip: httplimit.SkipInvalidCost},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rules explained, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rule %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if res, _ := a.AllowN(t.Context(), "x-key:k", 0); res.Remaining != 2 {
		t.Errorf("explaining charged: %d remain", res.Remaining)
	}

	skip := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: a}}, Skip: func(*http.Request) bool { return true }})
	if got := skip.Explain(r); len(got) != 1 || got[0].Skip != httplimit.SkipMiddleware || got[0].Skip.String() == "" {
		t.Errorf("Config.Skip: %+v", got)
	}
}
