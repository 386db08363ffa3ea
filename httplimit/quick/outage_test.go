package quick_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/redis/go-redis/v9"
)

// opening is a slog.Handler that writes to out and notes, for each Warn
// line of the breaker's opening, how many dials had been made by then.
type opening struct {
	slog.Handler
	dials *atomic.Int64
	at    *[]int64
}

func (h opening) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && r.Message == "circuit breaker open" {
		*h.at = append(*h.at, h.dials.Load())
	}
	return h.Handler.Handle(ctx, r)
}

// A Redis that refuses connections costs the one-liner a dial per call for
// 3 calls, not seconds of retried dials for twenty:
// the breaker then opens, every instance limits alone, and the outage is
// logged once, saying so. Once Redis is back the breaker closes, and the
// next outage is logged once again.
func TestRedisRefusedOpensBreakerOnce(t *testing.T) {
	srv := testkit.Redis(t)
	var dials atomic.Int64
	var d net.Dialer
	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	})
	defer client.Close()

	logs := &testkit.Buffer{}
	var at []int64 // only the test's goroutine logs: requests are sequential
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(opening{slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}), &dials, &at}))

	h := quick.LimitByIP(1000, time.Minute, quick.Redis(client))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func() *http.Response { return getFrom(h, "192.0.2.1:1").Result() }
	if res := get(); res.StatusCode != 200 {
		t.Fatalf("with Redis up: %d, want 200", res.StatusCode)
	}
	outage := func(n int) {
		t.Helper()
		srv.Kill()
		dials.Store(0)
		for i := range 25 {
			if res := get(); res.StatusCode != 200 {
				t.Fatalf("request %d of the outage: %d, want 200 (limited per instance)", i, res.StatusCode)
			}
		}
		if len(at) != n {
			t.Fatalf("outage %d: %d Warn lines of an opening, want %d:\n%s", n, len(at), n, logs)
		}
		if got := at[n-1]; got > failover.UnreachableInRow {
			t.Errorf("outage %d: %d dials before the breaker opened, want at most %d", n, got, failover.UnreachableInRow)
		}
		if want := "limiting per instance until Redis is back"; strings.Count(logs.String(), want) < n {
			t.Errorf("outage %d: the log does not say %q:\n%s", n, want, logs)
		}
	}
	outage(1)
	srv.Restart()
	testkit.Eventually(t, 20*time.Second, "the breaker closed, logged", func() bool {
		get()
		return strings.Contains(logs.String(), `msg="circuit breaker closed"`)
	})
	outage(2)
}
