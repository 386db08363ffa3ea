package checkapi

import (
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// failClosedLimiter is a limiter on a Redis that refuses every connection,
// behind a FailClosed failover store whose breaker backs off for an hour:
// every decision is a fail-closed denial with a RetryAfter.
func failClosedLimiter(t *testing.T) floodgate.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: testkit.RefusingAddr(t), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	s, err := failover.New(rs, failover.Options{Mode: failover.FailClosed, Guard: failover.GuardOptions{Backoff: time.Hour, MaxBackoff: time.Hour}})
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
	lim := failClosedLimiter(t)
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
		got := resp.Header.Values("Retry-After")
		if disable {
			if len(got) != 0 {
				t.Errorf("DisableRetryAfter: Retry-After %q, want none", got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("Retry-After %q, want one value", got)
		}
		if secs, err := strconv.Atoi(got[0]); err != nil || secs < 1 || secs > 3600 {
			t.Errorf("Retry-After %q, want 1 to 3600 seconds", got[0])
		}
	}
}
