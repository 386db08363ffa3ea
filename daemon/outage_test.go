package daemon

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/testkit"
)

// dialCounter counts the client's dials.
type dialCounter struct{ n atomic.Int64 }

func (c *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (c *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A Redis that refuses connections costs the daemon one dial per call for
// failover.UnreachableInRow calls, then the breaker is open; the outage is
// logged once, at Warn, saying what decides until Redis is back, whatever
// the probes that follow.
func TestRedisRefusedOpensBreakerOnce(t *testing.T) {
	logs := &testkit.Buffer{}
	d, err := New(mustParse(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: local_fallback, breaker: {backoff: 1ms, max_backoff: 2ms}}
policies: {api: {rate: 1000/s}}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`, testkit.RefusingAddr(t))), Options{LogOutput: logs})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dials := &dialCounter{}
	d.engine.client.AddHook(dials)
	lim := d.cur.Load().limiters["api"]
	for range failover.UnreachableInRow {
		if res, err := floodgate.Allow(context.Background(), lim, "k"); err != nil || res.Source != floodgate.SourceLocalFallback {
			t.Fatalf("with Redis refusing: %+v, %v; want a local-fallback decision", res, err)
		}
	}
	if st := d.engine.guard.Stats(); st.Opened != 1 || st.Calls != failover.UnreachableInRow {
		t.Fatalf("after %d refused calls: %+v, want the breaker opened once after as many calls", failover.UnreachableInRow, st)
	}
	if n := dials.n.Load(); n != failover.UnreachableInRow {
		t.Errorf("%d dials for %d calls, want one each", n, failover.UnreachableInRow)
	}
	// The probes that follow, each after a back-off of a millisecond or
	// two, fail too: still one outage.
	testkit.Eventually(t, 20*time.Second, "two probes failed", func() bool {
		floodgate.Allow(context.Background(), lim, "k")
		return d.engine.guard.Stats().Probes >= 2 && d.engine.guard.State() == failover.Open
	})
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 ||
		!strings.Contains(logs.String(), `msg="circuit breaker open" engine=redis failure_mode=local_fallback from=closed to=open reason="3 calls in a row could not connect`) ||
		!strings.Contains(logs.String(), `detail="limiting per instance until Redis is back"`) {
		t.Errorf("%d Warn lines, want one of the opening, saying why and what decides:\n%s", n, logs)
	}
}
