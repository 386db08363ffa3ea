package pgproxy_test

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestQueryLimits runs the query-limit cases against one PostgreSQL server.
func TestQueryLimits(t *testing.T) {
	pg := testkit.Postgres(t)

	t.Run("SimpleProtocol", func(t *testing.T) {
		lim, clock := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(3)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		for i := range 3 {
			if v, err := query(ctx, c, "SELECT 40 + 2", simple); err != nil || v != "42" {
				t.Fatalf("query %d: %q, %v; want 42", i+1, v, err)
			}
		}
		_, err := query(ctx, c, "SELECT 1", simple)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "53400" || pe.Message != "rate limit exceeded" || pe.Severity != "ERROR" {
			t.Fatalf("4th query: %v; want ERROR 53400 rate limit exceeded", err)
		}
		if !strings.Contains(pe.Detail, "global") || !strings.Contains(pe.Detail, "retry in 1h0m0s") || pe.Hint == "" {
			t.Errorf("detail %q, hint %q: want the scope, when to retry and a hint", pe.Detail, pe.Hint)
		}
		// The session goes on: the next query passes once the limit refills.
		clock.Advance(time.Hour)
		if v, err := query(ctx, c, "SELECT 'still here'", simple); err != nil || v != "still here" {
			t.Fatalf("query after refill: %q, %v", v, err)
		}
		if got := tp.metric(t, "floodgate_pg_queries_total", "scope", "global", "decision", "denied"); got != 1 {
			t.Errorf("denied metric %v, want 1", got)
		}
		if got := tp.metric(t, "floodgate_pg_queries_total", "scope", "global", "decision", "allowed"); got != 4 {
			t.Errorf("allowed metric %v, want 4", got)
		}
		tp.waitLog(t, "query rate limit exceeded")
		if !strings.Contains(tp.log.String(), "scope=global") || !strings.Contains(tp.log.String(), "client=127.0.0.x") {
			t.Errorf("rejection log line lacks scope or redacted client:\n%s", tp.log.String())
		}
	})

	t.Run("ExtendedProtocol", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(4)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		// A prepared statement: Prepare's Parse/Describe/Sync is free, each
		// execution (Bind/Execute/Sync) costs one.
		if _, err := c.Prepare(ctx, "add", "SELECT $1::int + $2::int"); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if v, err := query(ctx, c, "add", i, 1); err != nil || v != strconv.Itoa(i+1) {
				t.Fatalf("execution %d: %q, %v", i+1, v, err)
			}
		}
		if _, err := query(ctx, c, "add", 1, 1); pgCode(err) != "53400" {
			t.Fatalf("5th execution: %v; want 53400", err)
		}
		if _, err := query(ctx, c, "SELECT 1", pgx.QueryExecModeExec); pgCode(err) != "53400" {
			t.Fatalf("unnamed extended query: %v; want 53400", err)
		}
		// The rejected cycles were discarded up to their Sync: the session
		// is in step and the server still knows the statement.
		if err := lim.Reset(ctx, pgproxy.GlobalKey); err != nil {
			t.Fatal(err)
		}
		if v, err := query(ctx, c, "add", 20, 22); err != nil || v != "42" {
			t.Fatalf("after reset: %q, %v", v, err)
		}
	})

	t.Run("Batch", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(2)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		// A batch is one cycle (one Sync), whatever it holds: one unit.
		run := func() error {
			b := &pgx.Batch{}
			for i := range 5 {
				b.Queue("SELECT $1::int", i)
			}
			br := c.SendBatch(ctx, b)
			for i := range 5 {
				var v int
				if err := br.QueryRow().Scan(&v); err != nil {
					br.Close()
					return err
				}
				if v != i {
					t.Errorf("batch row %d = %d", i, v)
				}
			}
			return br.Close()
		}
		for i := range 2 {
			if err := run(); err != nil {
				t.Fatalf("batch %d: %v", i+1, err)
			}
		}
		if err := run(); pgCode(err) != "53400" {
			t.Fatalf("3rd batch: %v; want 53400", err)
		}
	})

	t.Run("TransactionNeverSplit", func(t *testing.T) {
		lim, clock := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(2)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		if _, err := c.Exec(ctx, "CREATE TEMP TABLE t (v int)"); err != nil { // unit 1
			t.Fatal(err)
		}
		tx, err := c.Begin(ctx) // unit 2: the statement that opens the transaction
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 { // free: inside the transaction, extended and simple
			if _, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
				t.Fatalf("insert %d inside the transaction: %v", i, err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1", simple); err != nil {
				t.Fatalf("select %d inside the transaction: %v", i, err)
			}
		}
		// An error puts the block in status E; the rollback must pass too.
		if _, err := tx.Exec(ctx, "SELECT 1/0"); pgCode(err) != "22012" {
			t.Fatalf("division by zero: %v", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatalf("rollback of a failed transaction: %v", err)
		}
		if _, err := c.Exec(ctx, "SELECT 1"); pgCode(err) != "53400" {
			t.Fatalf("query after the transaction: %v; want 53400", err)
		}
		// A transaction pipelined in one go, each statement synced on its
		// own: the statements after BEGIN arrive before the server said
		// "in transaction", and still pass.
		clock.Advance(time.Hour) // one unit
		pc := c.PgConn()
		pl := pc.StartPipeline(ctx)
		for _, sql := range []string{"BEGIN", "INSERT INTO t VALUES (100)", "INSERT INTO t VALUES (101)", "COMMIT"} {
			pl.SendQueryParams(sql, nil, nil, nil, nil)
			pl.SendPipelineSync()
		}
		if err := pl.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			res, err := pl.GetResults()
			if err != nil {
				t.Fatalf("pipelined statement %d: %v", i+1, err)
			}
			if rr, ok := res.(*pgconn.ResultReader); ok {
				if _, err := rr.Close(); err != nil {
					t.Fatalf("pipelined statement %d: %v", i+1, err)
				}
			}
			if _, err := pl.GetResults(); err != nil { // its Sync
				t.Fatalf("pipelined sync %d: %v", i+1, err)
			}
		}
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
		if v, err := query(ctx, c, "SELECT count(*) FROM t", simple); pgCode(err) != "53400" {
			t.Fatalf("after the pipelined transaction: %q, %v; want 53400", v, err)
		}
		clock.Advance(time.Hour)
		if v, err := query(ctx, c, "SELECT count(*) FROM t", simple); err != nil || v != "2" {
			t.Fatalf("rows committed by the pipelined transaction: %q, %v; want 2", v, err)
		}
		if got := tp.metric(t, "floodgate_pg_queries_uncharged_total", "reason", "transaction"); got < 23 {
			t.Errorf("uncharged in-transaction queries %v, want at least 23", got)
		}
	})

	t.Run("PipelinedRejection", func(t *testing.T) {
		// The second of two pipelined queries is refused: its error comes
		// after the first one's result, never before it.
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		pl := c.PgConn().StartPipeline(ctx)
		pl.SendQueryParams("SELECT pg_sleep(0.2), 'first'", nil, nil, nil, nil)
		pl.SendPipelineSync()
		pl.SendQueryParams("SELECT 'second'", nil, nil, nil, nil)
		pl.SendPipelineSync()
		if err := pl.Flush(); err != nil {
			t.Fatal(err)
		}
		res, err := pl.GetResults()
		rr, ok := res.(*pgconn.ResultReader)
		if err != nil || !ok {
			t.Fatalf("first result: %T, %v; want the first query's rows", res, err)
		}
		r := rr.Read()
		if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][1]) != "first" {
			t.Fatalf("first query: %v, %q", r.Err, r.Rows)
		}
		if res, err := pl.GetResults(); err != nil {
			t.Fatalf("first sync: %T, %v", res, err)
		}
		if _, err := pl.GetResults(); pgCode(err) != "53400" {
			t.Fatalf("second query: %v; want 53400", err)
		}
		if res, err := pl.GetResults(); err != nil {
			t.Fatalf("second sync: %T, %v", res, err)
		}
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("OnlyAuthenticatedSessionsCharged", func(t *testing.T) {
		// A query sent before the server has authenticated the session is
		// held until it has: a client that never authenticates spends no
		// one's budget, however it names its user.
		lim, _ := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{burst(5)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: lim}}})
		ctx := ctxT(t)
		for range 3 {
			nc, err := net.Dial("tcp", tp.Addr)
			if err != nil {
				t.Fatal(err)
			}
			nc.Write(append(startupPacket(3<<16, "user", testkit.PostgresSCRAMUser, "database", "postgres"), bytes.Repeat(msg('Q', "SELECT 1\x00"), 10)...))
			a := readAnswer(t, nc, 20*time.Second)
			nc.Close()
			if len(a.errors) != 1 || a.errors[0].code != "08P01" {
				t.Fatalf("queries before authentication: %s; want FATAL 08P01", a)
			}
		}
		if res, err := lim.AllowN(ctx, testkit.PostgresSCRAMUser, 0); err != nil || res.Remaining != 5 {
			t.Fatalf("the user's remaining budget is %d, %v; want 5 (nothing charged)", res.Remaining, err)
		}
		// Sent with its StartupMessage (trust: no password asked), a query
		// runs once the session is up, and is charged once.
		s := &rawSession{t: t, r: nil}
		nc, err := net.Dial("tcp", tp.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		s.nc, s.r = nc, bufio.NewReader(nc)
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		s.write(append(startupPacket(3<<16, "user", testkit.PostgresTrustUser, "database", "postgres"), msg('Q', "SELECT 1\x00")...))
		s.until('Z') // the startup's
		if got := s.until('Z'); got != "TDCZ" {
			t.Fatalf("the pipelined query answered %q, want TDCZ", got)
		}
		if res, err := lim.AllowN(ctx, testkit.PostgresTrustUser, 0); err != nil || res.Remaining != 4 {
			t.Fatalf("remaining %d, %v; want 4", res.Remaining, err)
		}
	})

	t.Run("PerUserOverride", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{
			Name:      "user",
			Limits:    []floodgate.Limit{burst(1)},
			Overrides: map[string][]floodgate.Limit{testkit.PostgresTrustUser: {burst(5)}},
		})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: lim}}})
		ctx := ctxT(t)
		passes := func(user string) int {
			c := tp.connect(t, user, "")
			n := 0
			for range 8 {
				_, err := c.Exec(ctx, "SELECT 1")
				if err == nil {
					n++
				} else if pgCode(err) != "53400" {
					t.Fatalf("%s: %v", user, err)
				}
			}
			return n
		}
		if n := passes(testkit.PostgresTrustUser); n != 5 {
			t.Errorf("overridden user passed %d queries, want 5", n)
		}
		if n := passes(testkit.PostgresSuperuser); n != 1 {
			t.Errorf("default user passed %d queries, want 1", n)
		}
		// A second session of the same user shares its limit.
		if n := passes(testkit.PostgresTrustUser); n != 0 {
			t.Errorf("second session of the overridden user passed %d queries, want 0", n)
		}
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		global, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(10)}})
		perUser, _ := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{burst(2)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{
			Global:  pgproxy.Scope{Limiter: global},
			PerUser: pgproxy.Scope{Limiter: perUser},
		}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		denied := 0
		for range 6 {
			if _, err := c.Exec(ctx, "SELECT 1"); pgCode(err) == "53400" {
				denied++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if denied != 4 {
			t.Fatalf("%d denied, want 4", denied)
		}
		// The 4 queries the user scope denied were refunded to global.
		res, err := global.AllowN(ctx, pgproxy.GlobalKey, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Remaining != 8 {
			t.Errorf("global remaining %d, want 8", res.Remaining)
		}
		if got := tp.metric(t, "floodgate_pg_queries_total", "scope", "user", "decision", "denied"); got != 4 {
			t.Errorf("user denied metric %v, want 4", got)
		}
	})

	t.Run("EmptyQueryExempt", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		for range 5 {
			if err := c.Ping(ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
			if _, err := c.Exec(ctx, " ; /* nothing */ ;", simple); err != nil {
				t.Fatalf("empty query: %v", err)
			}
		}
		if _, err := c.Exec(ctx, "SELECT 1", simple); err != nil {
			t.Fatalf("first real query: %v", err)
		}
		if _, err := c.Exec(ctx, "SELECT 1", simple); pgCode(err) != "53400" {
			t.Fatalf("second real query: %v; want 53400", err)
		}
		// With ChargeEmptyQuery, a ping counts.
		lim2, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp2 := startProxy(t, pg, pgproxy.Config{ChargeEmptyQuery: true, Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim2}}})
		c2 := tp2.connect(t, testkit.PostgresTrustUser, "")
		if err := c2.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c2.Ping(ctx); pgCode(err) != "53400" {
			t.Fatalf("second charged ping: %v; want 53400", err)
		}
	})

	t.Run("SetLimits", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "SELECT 1"); pgCode(err) != "53400" {
			t.Fatalf("%v; want 53400", err)
		}
		roomy, _ := memLimiter(t, floodgate.Policy{Name: "g2", Limits: []floodgate.Limit{burst(3)}})
		if err := tp.SetLimits(pgproxy.Limits{Global: pgproxy.Scope{Limiter: roomy}}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for range 5 {
			if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%d queries passed on the same connection under the new limits, want 3", n)
		}
		if err := tp.SetLimits(pgproxy.Limits{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("with no limits: %v", err)
		}
		if err := tp.SetLimits(pgproxy.Limits{PerIP: pgproxy.Scope{MaxWait: time.Second}}); err == nil {
			t.Fatal("SetLimits accepted a MaxWait without a Limiter")
		}
	})

	t.Run("MaxWait", func(t *testing.T) {
		// A real clock: 20 per second, one at a time. Waiting up to a
		// second, every query of a burst passes, slowly, instead of failing.
		store := memstore.New(memstore.Options{})
		t.Cleanup(func() { store.Close() })
		lim, err := floodgate.New(store, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{floodgate.PerSecond(20).WithBurst(1)}})
		if err != nil {
			t.Fatal(err)
		}
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: lim, MaxWait: 10 * time.Second}}})
		ctx := ctxT(t)
		const clients, each = 4, 5
		var wg sync.WaitGroup
		errs := make(chan error, clients*each)
		for range clients {
			c := tp.connect(t, testkit.PostgresTrustUser, "")
			wg.Go(func() {
				for i := range each {
					if _, err := c.Exec(ctx, "SELECT $1::int", i); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("a query failed instead of waiting: %v", err)
		}
		if passed := tp.metric(t, "floodgate_pg_query_waits_total", "scope", "user", "outcome", "passed"); passed == 0 {
			t.Errorf("no query waited, yet %d came at once through a limit of one at a time", clients*each)
		}
		if got := tp.metric(t, "floodgate_pg_queries_total", "scope", "user", "decision", "allowed"); got != clients*each {
			t.Errorf("allowed metric %v, want %d", got, clients*each)
		}
	})

	t.Run("MaxWaitTooShort", func(t *testing.T) {
		// A query that would have to wait longer than MaxWait fails at once.
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim, MaxWait: time.Minute}}})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "SELECT 1"); pgCode(err) != "53400" {
			t.Fatalf("%v; want 53400 (retry in an hour is beyond a minute's wait)", err)
		}
		if got := tp.metric(t, "floodgate_pg_query_waits_total", "scope", "global", "outcome", "rejected"); got != 1 {
			t.Errorf("rejected waits %v, want 1", got)
		}
	})
}
