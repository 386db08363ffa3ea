package checkapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/redislease"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// downLimiter is a limiter on a Redis that refuses every connection,
// behind a failover store of mode m whose breaker backs off for an hour:
// under FailClosed every decision is a denial with a RetryAfter.
func downLimiter(t *testing.T, m failover.Mode) floodgate.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: testkit.RefusingAddr(t), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	s, err := failover.New(rs, failover.Options{Mode: m, Guard: failover.GuardOptions{Backoff: time.Hour, MaxBackoff: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(s, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(10)}})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestFailClosedRetryAfter: a check the engine failed closed on is answered
// 503 with one Retry-After, the seconds until the breaker tries Redis again;
// with Headers.DisableRetryAfter it has none, as every other front end's.
func TestFailClosedRetryAfter(t *testing.T) {
	lim := downLimiter(t, failover.FailClosed)
	for _, disable := range []bool{false, true} {
		c := New(Config{Policies: map[string]floodgate.Limiter{"api": lim}, Logger: slog.New(slog.DiscardHandler),
			Headers: httplimit.Headers{DisableRetryAfter: disable}})
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		cc := checkClient{t: t, url: srv.URL + Path, c: srv.Client()}
		resp, m := cc.post(`{"policy":"api","key":"user:42"}`)
		if resp.StatusCode != 503 || m["allowed"] != false || m["source"] != string(floodgate.SourceFailClosed) {
			t.Fatalf("DisableRetryAfter %v: %d %v, want a fail-closed 503", disable, resp.StatusCode, m)
		}
		checkRetryAfter(t, resp.Header, disable)
	}
}

// TestFailOpenIs200: a check the engine failed open on is allowed, 200,
// with no quota (no state was read) and no Retry-After.
func TestFailOpenIs200(t *testing.T) {
	_, c := startCheck(t, map[string]floodgate.Limiter{"api": downLimiter(t, failover.FailOpen)})
	resp, m := c.post(`{"policy":"api","key":"user:42"}`)
	if resp.StatusCode != 200 || m["allowed"] != true || m["source"] != string(floodgate.SourceFailOpen) || m["limit"] != nil {
		t.Fatalf("%d %v, want a fail-open 200 without a limit", resp.StatusCode, m)
	}
	for _, name := range []string{"Retry-After", "X-Ratelimit-Remaining", "Ratelimit"} {
		if v := resp.Header.Values(name); len(v) != 0 {
			t.Errorf("%s %q on a fail-open answer", name, v)
		}
	}
}

// TestLeaseFailClosedRetryAfter: an acquire the lease store failed closed
// on is answered 503 with one Retry-After, the seconds until the breaker
// tries Redis again; with Headers.DisableRetryAfter it has none, as the
// check endpoint's answers.
func TestLeaseFailClosedRetryAfter(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testkit.RefusingAddr(t), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store, err := redislease.New(client, redislease.Options{Mode: failover.FailClosed,
		BreakerOptions: failover.BreakerOptions{MinCalls: 1, FailureRate: 0.01, Backoff: time.Hour, MaxBackoff: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := concurrency.New(store, concurrency.Options{Name: "check:reports", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, disable := range []bool{false, true} {
		c := New(Config{Concurrency: map[string]ConcurrencyLimit{"reports": {Limiter: lim, Lease: time.Minute}},
			Logger: slog.New(slog.DiscardHandler), Headers: httplimit.Headers{DisableRetryAfter: disable}})
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		cc := checkClient{t: t, url: srv.URL + AcquirePath, c: srv.Client()}
		resp, m := cc.post(`{"name":"reports","key":"user:42"}`)
		if resp.StatusCode != 503 || m["error"] == nil {
			t.Fatalf("DisableRetryAfter %v: %d %v, want a fail-closed 503", disable, resp.StatusCode, m)
		}
		checkRetryAfter(t, resp.Header, disable)
	}
}

// checkRetryAfter checks the Retry-After of a fail-closed 503: none with
// DisableRetryAfter, else exactly one value of 1 to 3600 seconds.
func checkRetryAfter(t *testing.T, h http.Header, disable bool) {
	t.Helper()
	got := h.Values("Retry-After")
	if disable {
		if len(got) != 0 {
			t.Errorf("DisableRetryAfter: Retry-After %q, want none", got)
		}
		return
	}
	if len(got) != 1 {
		t.Fatalf("Retry-After %q, want one value", got)
	}
	if secs, err := strconv.Atoi(got[0]); err != nil || secs < 1 || secs > 3600 {
		t.Errorf("Retry-After %q, want 1 to 3600 seconds", got[0])
	}
}
