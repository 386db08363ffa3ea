package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/netguard"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
)

// TestPostgresDecidesOnTheLoop: the daemon's PostgreSQL listener, its
// limits on the memory engine, decides every query where its event loop
// reads it: the session is on the loop (the listener's wrapped
// connections were relayed by goroutines), its Limits are Local and no
// decision is handed to a goroutine, concurrent-query slots included; the
// listener's connection count holds the session until it ends. On the redis
// engine the limits are not Local: a round trip to Redis must not stall
// the loop.
func TestPostgresDecidesOnTheLoop(t *testing.T) {
	pg := testkit.Postgres(t)
	const limits = `
  rate_limit:
    global: {rate: 100000/s}
    per_user: {rate: 100000/s}
    per_ip: {rate: 100000/s}
  concurrency: {per_user: 4}
admin: {listen: ""}
`
	d := started(t, fmt.Sprintf(`
policies: {api: {rate: 1/s}}
postgres:
  listen: 127.0.0.1:0
  upstream: %s`, pg.Addr)+limits)
	if !d.pg.Limits().Local {
		t.Fatal("memory engine: the PostgreSQL limits are not Local")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, "postgres://"+testkit.PostgresTrustUser+"@"+d.Addrs().Postgres.String()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const queries = 20
	for i := range queries {
		var n int
		if err := c.QueryRow(ctx, "SELECT $1::int", i).Scan(&n); err != nil || n != i {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
		if _, err := c.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("simple query %d: %v", i, err)
		}
	}
	st := d.pg.LoopStats()
	if st.Connections != 1 {
		t.Fatalf("%d connections on the event loop, want 1", st.Connections)
	}
	if st.Parked != 0 {
		t.Fatalf("%d of %d decisions left the event loop, want 0", st.Parked, 2*queries)
	}
	// The listener's count of its connections holds the session while the
	// loop relays it, and lets it go when it ends.
	var guard *netguard.Listener
	for _, f := range d.run.fronts {
		if f.name == "postgres" {
			guard = f.guard
		}
	}
	if n := guard.Open(); n != 1 {
		t.Fatalf("the listener counts %d connections open during the session, want 1", n)
	}
	c.Close(ctx)
	testkit.Eventually(t, 10*time.Second, "the listener's count to drop", func() bool { return guard.Open() == 0 })

	rd := testkit.Redis(t)
	dr := started(t, fmt.Sprintf(`
storage: {engine: redis, redis: {addrs: [%q]}, failure: {mode: fail_closed}}
policies: {api: {rate: 1/s}}
postgres:
  listen: 127.0.0.1:0
  upstream: %s`, rd.Addr, pg.Addr)+limits)
	if dr.pg.Limits().Local {
		t.Fatal("redis engine: the PostgreSQL limits are Local")
	}
}
