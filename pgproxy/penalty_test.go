package pgproxy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestQueryPenalty: a per-user level with a penalty refuses every query of
// the user for the penalty's time after its first denial, though the limit
// refills meanwhile; the session goes on, and a reset lifts the penalty.
func TestQueryPenalty(t *testing.T) {
	pg := testkit.Postgres(t)
	lim, clock := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{burst(2)}, Penalty: 2 * time.Hour})
	tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: lim}}})
	c := tp.connect(t, testkit.PostgresTrustUser, "")
	ctx := ctxT(t)
	for i := range 2 {
		if _, err := query(ctx, c, "SELECT 1", simple); err != nil {
			t.Fatalf("query %d: %v", i+1, err)
		}
	}
	refused := func(what, retry string) {
		t.Helper()
		_, err := query(ctx, c, "SELECT 1", simple)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "53400" || !strings.Contains(pe.Detail, "retry in "+retry) {
			t.Fatalf("%s: %v; want 53400 with retry in %s", what, err, retry)
		}
	}
	refused("the query over the limit", "2h0m0s")
	clock.Advance(time.Hour) // the limit holds one query again
	refused("a query an hour into the penalty", "1h0m0s")
	if err := lim.Reset(ctx, testkit.PostgresTrustUser); err != nil {
		t.Fatal(err)
	}
	if v, err := query(ctx, c, "SELECT 'back'", simple); err != nil || v != "back" {
		t.Fatalf("after a reset: %q, %v", v, err)
	}
}
