package pgproxy_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestConcurrentQueries holds n queries of one user in flight on an
// advisory lock the test holds outside the proxy, so that which query
// finds the slots taken does not depend on timing: the n+1th is answered
// 53300 and its session goes on, another user is not limited, and the
// slots come back when the queries end and when their clients are killed.
func TestConcurrentQueries(t *testing.T) {
	const n = 3
	pg := testkit.Postgres(t)
	ctx := ctxT(t)
	admin, err := pgx.Connect(ctx, pg.DSN(testkit.PostgresSuperuser, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	blocked := func() int {
		v, err := query(ctx, admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
		if err != nil {
			t.Fatal(err)
		}
		k, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	newProxy := func(t *testing.T, o concurrency.Options) (*testProxy, *concurrency.Limiter) {
		o.Limit = n
		lim, err := concurrency.New(concurrency.NewLocal(), o)
		if err != nil {
			t.Fatal(err)
		}
		return startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{ConcurrentQueries: lim}}), lim
	}

	for _, mode := range []struct {
		name string
		mode pgx.QueryExecMode
	}{{"Simple", pgx.QueryExecModeSimpleProtocol}, {"Extended", pgx.QueryExecModeCacheStatement}} {
		t.Run(mode.name, func(t *testing.T) {
			tp, _ := newProxy(t, concurrency.Options{})
			if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(1)"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for range n {
				c := tp.connect(t, testkit.PostgresTrustUser, "")
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := c.Exec(ctx, "SELECT pg_advisory_lock_shared($1::bigint), pg_advisory_unlock_shared($1::bigint)", mode.mode, 1)
					errs <- err
				}()
			}
			testkit.Eventually(t, 20*time.Second, "the queries to hold their slots", func() bool { return blocked() == n })

			extra := tp.connect(t, testkit.PostgresTrustUser, "")
			_, err := extra.Exec(ctx, "SELECT $1::int", mode.mode, 1)
			var pe *pgconn.PgError
			if pgCode(err) != "53300" || !errors.As(err, &pe) || pe.Message != "too many concurrent queries" || pe.Severity != "ERROR" ||
				!strings.Contains(pe.Detail, testkit.PostgresTrustUser) || pe.Hint == "" {
				t.Fatalf("query %d: %v, want ERROR 53300 too many concurrent queries with detail and hint", n+1, err)
			}
			other := tp.connect(t, testkit.PostgresSCRAMUser, testkit.PostgresPassword)
			if v, err := query(ctx, other, "SELECT 7", mode.mode); err != nil || v != "7" {
				t.Fatalf("another user's query: %q, %v; want 7 (its own slots)", v, err)
			}

			if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock(1)"); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("a query within the limit: %v", err)
				}
			}
			// Every slot came back at its ReadyForQuery: n at once pass again,
			// and the refused session goes on.
			if v, err := query(ctx, extra, "SELECT $1::int", mode.mode, 8); err != nil || v != "8" {
				t.Fatalf("the refused session's next query: %q, %v; want 8", v, err)
			}
			if got := tp.metric(t, "floodgate_pg_concurrent_queries_refused_total"); got != 1 {
				t.Errorf("floodgate_pg_concurrent_queries_refused_total = %v, want 1", got)
			}
		})
	}

	t.Run("KilledClients", func(t *testing.T) {
		// A long max_wait: the waiting query passes only once the killed
		// clients' slots are back.
		tp, lim := newProxy(t, concurrency.Options{MaxWaiting: 4, MaxWait: time.Minute})
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(2)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") })
		var sessions []*rawSession
		for range n {
			s := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
			s.write(msg('Q', "SELECT pg_advisory_lock_shared(2)\x00"))
			sessions = append(sessions, s)
		}
		testkit.Eventually(t, 20*time.Second, "the queries to hold their slots", func() bool { return blocked() == n })

		// A waiting client that disconnects leaves the queue.
		gone := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		gone.write(msg('Q', "SELECT 1\x00"))
		testkit.Eventually(t, 20*time.Second, "the query to wait for a slot", func() bool { return lim.Waiting() == 1 })
		gone.nc.Close()
		testkit.Eventually(t, 20*time.Second, "the disconnected client to leave the queue", func() bool { return lim.Waiting() == 0 })

		// A CancelRequest (pgx sends one when the context ends) answers a
		// waiting query 57014, and its session goes on.
		canceled := tp.connect(t, testkit.PostgresTrustUser, "")
		qctx, qcancel := context.WithCancel(ctx)
		cerr := make(chan error, 1)
		go func() {
			_, err := canceled.Exec(qctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
			cerr <- err
		}()
		testkit.Eventually(t, 20*time.Second, "the query to wait for a slot", func() bool { return lim.Waiting() == 1 })
		qcancel()
		if err := <-cerr; err == nil {
			t.Fatal("a canceled waiting query passed")
		}
		testkit.Eventually(t, 20*time.Second, "the canceled query to leave the queue", func() bool { return lim.Waiting() == 0 })

		waiter := tp.connect(t, testkit.PostgresTrustUser, "")
		done := make(chan error, 1)
		go func() {
			_, err := waiter.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
			done <- err
		}()
		testkit.Eventually(t, 20*time.Second, "the query to wait for a slot", func() bool {
			select {
			case err := <-done:
				t.Fatalf("a query beyond the limit ended (%v) before any slot came free", err)
			default:
			}
			return lim.Waiting() == 1
		})
		for _, s := range sessions {
			s.nc.Close()
		}
		if err := <-done; err != nil {
			t.Fatalf("the waiting query after the holders were killed: %v", err)
		}
	})
}

// TestConcurrentQueriesRateDenied checks that a query the rate limit
// refuses gives back the slot it took: with one slot, another connection's
// query after a 53400 passes once the rate allows it, in both protocols.
func TestConcurrentQueriesRateDenied(t *testing.T) {
	pg := testkit.Postgres(t)
	ctx := ctxT(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			rate, clock := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{burst(1)}})
			conc, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: rate}, ConcurrentQueries: conc}})
			c := tp.connect(t, testkit.PostgresTrustUser, "")
			if v, err := query(ctx, c, "SELECT $1::int", mode, 1); err != nil || v != "1" {
				t.Fatalf("first query: %q, %v", v, err)
			}
			if _, err := query(ctx, c, "SELECT $1::int", mode, 2); pgCode(err) != "53400" {
				t.Fatalf("second query: %v, want 53400", err)
			}
			clock.Advance(time.Hour)
			// Another connection: the slot is the user's, not this one's.
			c2 := tp.connect(t, testkit.PostgresTrustUser, "")
			if v, err := query(ctx, c2, "SELECT $1::int", mode, 3); err != nil || v != "3" {
				t.Fatalf("the query after a rate denial: %q, %v; want 3 (the denied query's slot back)", v, err)
			}
		})
	}
}
