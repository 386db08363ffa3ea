package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
)

// downStore is a remote engine that always fails, as a dead Redis does.
type downStore struct{}

var errRedisDown = errors.New("connection refused")

func (downStore) Decide(context.Context, *algo.Set, string, int64) (algo.Verdict, error) {
	return algo.Verdict{}, errRedisDown
}
func (downStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errRedisDown
}
func (downStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error {
	return errRedisDown
}
func (downStore) Refund(context.Context, *algo.Set, string, int64) error {
	return errRedisDown
}
func (downStore) Reset(context.Context, *algo.Set, string) error { return errRedisDown }
func (downStore) ValidateLimit(floodgate.Limit) error            { return nil }

func failoverLimiter(t *testing.T, p failover.Mode) floodgate.Limiter {
	t.Helper()
	s, err := failover.New(downStore{}, failover.Options{Mode: p, Guard: failover.GuardOptions{Backoff: 3 * time.Second, MaxBackoff: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(s, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// A fail-closed denial is the limiter's failure, not the client's excess:
// 503 with Retry-After, and no quota headers, since no state was read.
func TestFailClosedDenialIs503(t *testing.T) {
	mw := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: failoverLimiter(t, failover.FailClosed)}}})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran for a fail-closed request")
	}))
	var rec = get(h, "/", "192.0.2.1:1234")
	for i := 0; i < 10; i++ { // past the breaker's threshold: the open breaker answers too
		rec = get(h, "/", "192.0.2.1:1234")
	}
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got == "" || got == "0" {
		t.Errorf("Retry-After = %q, want the seconds until the breaker probes again", got)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type = %q", got)
	}
	for _, name := range []string{"X-RateLimit-Remaining", "X-RateLimit-Limit", "RateLimit"} {
		if v := rec.Header().Get(name); v != "" {
			t.Errorf("%s = %q on a response that read no state", name, v)
		}
	}
}

// A fail-open admission serves the request without advertising a quota.
func TestFailOpenServesWithoutQuotaHeaders(t *testing.T) {
	mw := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: failoverLimiter(t, failover.FailOpen)}}})
	served := 0
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	for i := 0; i < 10; i++ {
		rec := get(h, "/", "192.0.2.1:1234")
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
		if v := rec.Header().Get("X-RateLimit-Remaining"); v != "" {
			t.Fatalf("request %d: X-RateLimit-Remaining = %q from a limiter that read nothing", i, v)
		}
	}
	if served != 10 {
		t.Fatalf("served %d of 10", served)
	}
}
