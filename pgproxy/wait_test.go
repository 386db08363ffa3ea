package pgproxy_test

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
)

// TestMaxWaitUnderLoad offers queries under a limit of 100/s (burst 10)
// with max_wait 500ms, from several connections at once: pgbench at 95% of
// the limit, where every query must pass however the arrivals bunch up
// (each of the 10 clients has one query in flight, so a query waits at
// most 10 turns, 100 ms, plus the proxy's wake-ups, which the burst
// absorbs; when every waiter asked the limiter on its own, some of them
// lost that race until their max_wait ran out, and pgbench aborted them),
// then 80 pgx clients at twice the limit, where the excess gets 53400
// after waiting its max_wait, and what passes is what the limit admits.
func TestMaxWaitUnderLoad(t *testing.T) {
	pg := testkit.Postgres(t)
	pgbench := pg.Bin("pgbench")
	if out, err := exec.Command(pgbench, "-i", "-q", "-s", "1", pg.DSN(testkit.PostgresSuperuser, "postgres")).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	const rate, burst, maxWait = 100, 10, 500 * time.Millisecond
	newProxy := func(t *testing.T) *testProxy {
		// The system clock, not the engine's coarse default, so that what
		// passes can be checked against the limit to the unit.
		store := memstore.New(memstore.Options{Clock: clock.System})
		t.Cleanup(func() { store.Close() })
		lim, err := floodgate.New(store, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{floodgate.PerSecond(rate).WithBurst(burst)}})
		if err != nil {
			t.Fatal(err)
		}
		return startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: lim, MaxWait: maxWait}}})
	}

	t.Run("UnderTheLimit", func(t *testing.T) {
		tp := newProxy(t)
		host, port, _ := net.SplitHostPort(tp.Addr)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, pgbench, "-n", "-S", "-c", "10", "-j", "1", "-R", strconv.Itoa(rate*95/100), "-T", "10",
			"-h", host, "-p", port, "-U", testkit.PostgresSuperuser, "postgres").CombinedOutput()
		t.Logf("pgbench -c 10 -R 95 through a limit of 100/s (burst 10, max_wait 500ms):\n%s", out)
		if err != nil || strings.Contains(string(out), "aborted") {
			t.Fatalf("pgbench: %v; want no client aborted", err)
		}
		if m := regexp.MustCompile(`number of failed transactions: (\d+)`).FindSubmatch(out); m == nil || string(m[1]) != "0" {
			t.Errorf("failed transactions: %q; want 0", m)
		}
		if got := tp.metric(t, "floodgate_pg_query_waits_total", "scope", "user", "outcome", "rejected"); got != 0 {
			t.Errorf("%v queries rejected after waiting; want none under the limit", got)
		}
		if got := tp.metric(t, "floodgate_pg_query_waits_total", "scope", "user", "outcome", "passed"); got == 0 {
			t.Error("no query waited: the test did not load the queue")
		}
	})

	t.Run("TwiceTheLimit", func(t *testing.T) {
		tp := newProxy(t)
		// 200/s offered. A client waits for its answer before it sends
		// again, so even if every query waited its whole max_wait, the
		// clients would still offer 80 / 0.5 s = 160/s, more than the
		// limit: the line overflows however slow the machine is.
		const clients, period, run = 80, 400 * time.Millisecond, 3 * time.Second
		type result struct {
			waited time.Duration
			code   string
		}
		var (
			mu      sync.Mutex
			results []result
			wg      sync.WaitGroup
		)
		ctx := ctxT(t)
		conns := make([]*pgx.Conn, clients)
		for i := range conns {
			conns[i] = tp.connect(t, testkit.PostgresTrustUser, "")
		}
		start := time.Now()
		for i, c := range conns {
			wg.Go(func() {
				next := start.Add(time.Duration(i) * period / clients)
				for next.Before(start.Add(run)) {
					time.Sleep(time.Until(next))
					sent := time.Now()
					_, err := c.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
					mu.Lock()
					results = append(results, result{time.Since(sent), pgCode(err)})
					mu.Unlock()
					if err != nil && pgCode(err) != "53400" {
						t.Errorf("a query failed with %v; want a result or 53400", err)
						return
					}
					next = next.Add(period)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		passed, denied := 0, 0
		for _, r := range results {
			if r.code == "" {
				passed++
				continue
			}
			denied++
			// A query is refused once its max_wait is over, or at most
			// one turn (10 ms) before it when the limiter says its turn
			// comes after it.
			if r.waited < maxWait-time.Second/rate {
				t.Errorf("a query was refused after %s; want after its max_wait (%s) less at most one turn", r.waited, maxWait)
			}
		}
		t.Logf("%d queries offered in %s: %d passed, %d refused with 53400", len(results), elapsed.Round(time.Millisecond), passed, denied)
		if limit := burst + int(elapsed.Seconds()*rate); passed > limit {
			t.Errorf("%d queries passed in %s, more than the limit admits (%d)", passed, elapsed, limit)
		}
		if denied == 0 {
			t.Error("nothing was refused at twice the limit")
		}
		if got := tp.metric(t, "floodgate_pg_queries_total", "scope", "user", "decision", "allowed"); int(got) != passed {
			t.Errorf("allowed metric %v, want %d", got, passed)
		}
	})
}
