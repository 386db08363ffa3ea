package pgproxy_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// The daemon's YAML, in Go:
//
//	postgres:
//	  listen: 127.0.0.1:6432
//	  upstream: 127.0.0.1:5432
//	  rate_limit:
//	    global:   {rate: 1000/s, burst: 100}
//	    per_user: {rate: 100/s, burst: 50, max_wait: 50ms,
//	               overrides: {batch_worker: {rate: 500/s, burst: 200}}}
//	    per_ip:   {rate: 100/s, burst: 50}
//
// A store shared by several proxies (a redisstore.Store) makes the limits
// hold across all of them. Here the per-user limit lets a user's first
// three queries through and answers the fourth with the proxy's own error,
// SQLSTATE 53400, in a session that goes on.
func Example() {
	upstream := os.Getenv("PG_ADDR") // your PostgreSQL, e.g. "localhost:5432"
	store := memstore.New(memstore.Options{})
	defer store.Close()
	policy := func(name string, l floodgate.Limit, overrides map[string][]floodgate.Limit) floodgate.Limiter {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}, Overrides: overrides})
		if err != nil {
			log.Fatal(err)
		}
		return lim
	}
	obs, err := metrics.NewPostgres(prometheus.NewRegistry(), metrics.PostgresOptions{}) // the caller's registry
	if err != nil {
		log.Fatal(err)
	}
	p, err := pgproxy.New(pgproxy.Config{
		Upstream: upstream,
		Observer: obs,
		Limits: pgproxy.Limits{
			Global: pgproxy.Scope{Limiter: policy("pg-global", floodgate.PerSecond(1000).WithBurst(100), nil)},
			PerUser: pgproxy.Scope{
				Limiter: policy("pg-user", floodgate.PerMinute(3), map[string][]floodgate.Limit{
					"batch_worker": {floodgate.PerSecond(500).WithBurst(200)},
				}),
				MaxWait: 50 * time.Millisecond,
			},
			PerIP: pgproxy.Scope{Limiter: policy("pg-ip", floodgate.PerSecond(100).WithBurst(50), nil)},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1})),
	})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go p.Serve(ln)
	defer p.Close()

	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, "postgres://postgres@"+ln.Addr().String()+"/postgres?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	for range 4 {
		res, err := conn.Exec(ctx, "SELECT 1").ReadAll()
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe):
			fmt.Println(pe.Severity, pe.Code, pe.Message)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(string(res[0].Rows[0][0]))
		}
	}
	// Output:
	// 1
	// 1
	// 1
	// ERROR 53400 rate limit exceeded
}

// TestMain starts the PostgreSQL server the Example talks to.
func TestMain(m *testing.M) {
	pg, err := testkit.StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("PG_ADDR", pg.Addr)
	code := m.Run()
	pg.Close()
	os.Exit(code)
}
