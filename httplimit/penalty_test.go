package httplimit_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// A library user's login middleware with a penalty: after 3 failures the
// next attempt is refused and the client is out for 15 minutes, the right
// password included, with headers that tell the penalty's end; a reset
// lifts it.
func TestCountFailedWithPenalty(t *testing.T) {
	e := newEnv(t)
	lim, err := floodgate.New(e.store, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerMinute(3)}, Penalty: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := mustNew(t, httplimit.Config{
		Rules:   []httplimit.Rule{{Limiter: lim, Key: httplimit.KeyByIP(nil), Count: httplimit.CountFailed}},
		Headers: httplimit.Headers{Source: true},
	}).Handler(login)

	for i := range 3 {
		if rec := postLogin(h, client, "alice", "guess"); rec.Code != 401 {
			t.Fatalf("failed login %d: %d", i+1, rec.Code)
		}
	}
	check := func(what string, wantRetry string) {
		t.Helper()
		rec := postLogin(h, client, "alice", "right")
		hd := rec.Header()
		if rec.Code != 429 || hd.Get("Retry-After") != wantRetry || hd.Get("X-RateLimit-Remaining") != "0" ||
			hd.Get("X-RateLimit-Reset") != wantRetry || hd.Get("X-RateLimit-Source") != "penalty" {
			t.Fatalf("%s: %d, headers %v; want 429, Retry-After and Reset %s, Remaining 0, Source penalty", what, rec.Code, hd, wantRetry)
		}
	}
	check("the attempt after 3 failures", "900")
	e.clock.Advance(5 * time.Minute) // the limit is full again
	check("the right password 5 minutes into the penalty", "600")
	if err := lim.Reset(t.Context(), "203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	if rec := postLogin(h, client, "alice", "right"); rec.Code != 200 {
		t.Fatalf("after a reset: %d, want 200", rec.Code)
	}
}
