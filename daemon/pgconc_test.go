package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPostgresConcurrency runs postgres.concurrency through the daemon
// against a real PostgreSQL: with per_user 1, a second query of the user
// while the first is held on an advisory lock is refused 53300, and passes
// once the first has ended.
func TestPostgresConcurrency(t *testing.T) {
	pg := testkit.Postgres(t)
	d := started(t, fmt.Sprintf(`
policies: {api: {rate: 1/s}}
postgres:
  listen: 127.0.0.1:0
  upstream: %s
  concurrency: {per_user: 1}
admin: {listen: ""}
`, pg.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(dsn string) *pgx.Conn {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	admin := connect(pg.DSN(testkit.PostgresSuperuser, "postgres"))
	through := "postgres://" + testkit.PostgresTrustUser + "@" + d.Addrs().Postgres.String() + "/postgres?sslmode=disable"
	holder, other := connect(through), connect(through)

	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(3)"); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := holder.Exec(ctx, "SELECT pg_advisory_lock_shared(3), pg_advisory_unlock_shared(3)")
		held <- err
	}()
	testkit.Eventually(t, 20*time.Second, "the first query to hold the slot", func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&n)
		return err == nil && n == 1
	})
	_, err := other.Exec(ctx, "SELECT 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "53300" || pe.Message != "too many concurrent queries" {
		t.Fatalf("a second query of the user: %v, want ERROR 53300 too many concurrent queries", err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock(3)"); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the first query: %v", err)
	}
	if _, err := other.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the refused session's next query: %v", err)
	}
	// The proxy reports to the daemon's registry through metrics.Postgres.
	if got, err := testutil.GatherAndCount(d.Registry(), "floodgate_pg_concurrent_queries_refused_total", "floodgate_pg_client_connections"); err != nil || got != 2 {
		t.Fatalf("the proxy's metrics on the daemon's registry: %d series, %v", got, err)
	}
	mfs, _ := d.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() == "floodgate_pg_concurrent_queries_refused_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 1 {
				t.Errorf("floodgate_pg_concurrent_queries_refused_total = %v, want 1", v)
			}
		}
	}
}

// TestPostgresStartupTimeoutDefault: the postgres listener's
// header_timeout, its clients' startup bound, defaults to the library's
// pgproxy.DefaultStartupTimeout, so serve and a Go program agree.
func TestPostgresStartupTimeoutDefault(t *testing.T) {
	c, err := config.Parse("test.yaml", []byte("policies: {api: {rate: 1/s}}\npostgres: {upstream: 127.0.0.1:5432}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Postgres.Bounds.HeaderTimeout.D(); got != pgproxy.DefaultStartupTimeout {
		t.Errorf("postgres.bounds.header_timeout defaults to %s; pgproxy.DefaultStartupTimeout is %s", got, pgproxy.DefaultStartupTimeout)
	}
}
