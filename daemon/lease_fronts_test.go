package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/testkit"
)

// redisCalls is the decisions srv has been sent (INFO commandstats): its
// script calls and plain counts (INCRBY), each one round trip; the
// commands scripts run inside are not counted.
func redisCalls(t *testing.T, srv *testkit.RedisServer) int64 {
	t.Helper()
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_incrby":
		default:
			continue
		}
		c, _, _ := strings.Cut(stats, ",")
		calls, err := strconv.ParseInt(c, 10, 64)
		if !ok || err != nil {
			t.Fatalf("INFO commandstats: %q", line)
		}
		n += calls
	}
	return n
}

// hourOf is the fixed hour window of now, to tell whether a run
// crossed into a second one.
func hourOf() int64 { return time.Now().Unix() / 3600 }

// TestEnvoyLease: with envoy.lease: auto, a hot descriptor of the rule
// files is decided mostly without Redis, and never above its limit, in
// both ways of counting: all_or_nothing, and independent with
// charge_denied (counted as envoyproxy/ratelimit counts, plainly, without
// a script). Under the latter, blocks must be taken in the same plain
// count as the decisions they cannot cover: taken in the script's count,
// each count admitted up to the limit on its own.
func TestEnvoyLease(t *testing.T) {
	for _, mode := range []string{"descriptors: all_or_nothing", "descriptors: independent\n  charge_denied: true"} {
		t.Run(strings.Fields(mode)[1], func(t *testing.T) {
			const limit, calls = 1000, 3000
			srv := testkit.Redis(t)
			dir := t.TempDir()
			rl := filepath.Join(dir, "rl.yaml")
			if err := os.WriteFile(rl, []byte(fmt.Sprintf(`domain: d
descriptors:
  - {key: k, rate_limit: {unit: hour, requests_per_unit: %d}}
  - {key: big, rate_limit: {unit: hour, requests_per_unit: 1000000}}
`, limit)), 0o644); err != nil {
				t.Fatal(err)
			}
			d := started(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: fail_closed}
envoy:
  listen: 127.0.0.1:0
  ratelimit_config: [%q]
  lease: auto
  lease_max: 50
  %s
admin: {listen: ""}
`, srv.Addr, rl, mode))
			conn, err := grpc.NewClient(d.Addrs().Envoy.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rc := rlsv3.NewRateLimitServiceClient(conn)
			run := func(key string) int64 { return envoyCalls(t, rc, key, calls) }
			// Under its limit, a hot descriptor costs Redis a fraction of
			// a command per call.
			before := redisCalls(t, srv)
			if ok := run("big"); ok != calls {
				t.Fatalf("%d of %d calls admitted under a limit of 1000000", ok, calls)
			}
			rcalls := redisCalls(t, srv) - before
			if rcalls > calls/5 {
				t.Fatalf("%d Redis calls for %d calls: the hot descriptor was not leased", rcalls, calls)
			}
			// Past its limit, never more than the limit.
			hour := hourOf()
			ok := run("k")
			if windows := hourOf() - hour + 1; ok > limit*windows {
				t.Fatalf("%d of %d calls admitted in %d window(s) of %d", ok, calls, windows, limit)
			}
			if ok < limit/2 {
				t.Fatalf("only %d of %d calls admitted under a limit of %d", ok, calls, limit)
			}
			t.Logf("%d Redis calls for %d calls; %d admitted of %d", rcalls, calls, ok, limit)
		})
	}
}

// envoyCalls makes calls calls on descriptor d: key from 8 callers and
// returns how many were admitted.
func envoyCalls(t *testing.T, rc rlsv3.RateLimitServiceClient, key string, calls int64) int64 {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "hot"}}}}}
	var ok, next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= calls {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := rc.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

// TestEnvoyLeaseReload: envoy.lease applies by a reload (the rule
// policies are rebuilt on the leasing store), as the rule files do.
func TestEnvoyLeaseReload(t *testing.T) {
	const calls = 600
	srv := testkit.Redis(t)
	rl := filepath.Join(t.TempDir(), "rl.yaml")
	if err := os.WriteFile(rl, []byte("domain: d\ndescriptors: [{key: big, rate_limit: {unit: hour, requests_per_unit: 1000000}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := func(lease string) string {
		if lease == "auto" {
			lease = "auto\n  lease_max: 40"
		}
		return fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: fail_closed}
envoy:
  listen: 127.0.0.1:0
  ratelimit_config: [%q]
  lease: %s
admin: {listen: ""}
`, srv.Addr, rl, lease)
	}
	d := started(t, conf("off"))
	conn, err := grpc.NewClient(d.Addrs().Envoy.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	before := redisCalls(t, srv)
	envoyCalls(t, rc, "big", calls)
	exact := redisCalls(t, srv) - before // batched: fewer than calls
	if err := d.Apply(mustParse(t, conf("auto"))); err != nil {
		t.Fatalf("a reload turning envoy.lease on: %v", err)
	}
	before = redisCalls(t, srv)
	envoyCalls(t, rc, "big", calls)
	if n := redisCalls(t, srv) - before; n*3 > exact {
		t.Fatalf("after a reload to lease: auto: %d Redis calls for %d calls, %d before it", n, calls, exact)
	}
	if c := d.engine.leaseCap("d.big"); c != 40 {
		t.Fatalf("after a reload to lease_max: 40, the rule's cap is %d", c)
	}
}

// TestPostgresLease: a rate_limit level with lease: auto decides a busy
// user's queries mostly without Redis, never above its limit.
func TestPostgresLease(t *testing.T) {
	const limit, queries = 100000, 600
	srv := testkit.Redis(t)
	pg := testkit.Postgres(t)
	d := started(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: fail_closed}
postgres:
  listen: 127.0.0.1:0
  upstream: %s
  rate_limit:
    per_user: {rate: %d/h, algorithm: fixed_window, lease: auto, lease_max: 20}
admin: {listen: ""}
`, srv.Addr, pg.Addr, limit))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, "postgres://"+testkit.PostgresTrustUser+"@"+d.Addrs().Postgres.String()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	before := redisCalls(t, srv)
	ok := 0
	for range queries {
		_, err := c.Exec(ctx, "SELECT 1")
		var pe *pgconn.PgError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &pe) && pe.Code == "53400":
		default:
			t.Fatal(err)
		}
	}
	rcalls := redisCalls(t, srv) - before
	if ok != queries {
		t.Fatalf("%d of %d queries admitted under a limit of %d", ok, queries, limit)
	}
	if rcalls > queries/3 {
		t.Fatalf("%d Redis calls for %d queries: the level was not leased", rcalls, queries)
	}
	t.Logf("%d admitted, %d Redis calls for %d queries", ok, rcalls, queries)
}

// TestHybridLease: under the hybrid engine a policy with lease: auto
// leases the global part: a hot key passing the filter is answered from
// blocks (Source lease), mostly without Redis.
func TestHybridLease(t *testing.T) {
	const calls = 600
	srv := testkit.Redis(t)
	d := started(t, fmt.Sprintf(`
storage:
  engine: hybrid
  redis: {addrs: [%q]}
  hybrid: {instances: 1}
policies:
  api: {rate: 100000/h, lease: auto, lease_max: 20}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`, srv.Addr))
	lim := d.cur.Load().limiters["api"]
	before := redisCalls(t, srv)
	sources := map[string]int{}
	for range calls {
		res, err := lim.AllowN(context.Background(), "k", 1)
		if err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
		sources[string(res.Source)]++
	}
	rcalls := redisCalls(t, srv) - before
	if sources["lease"] < calls/2 || rcalls > calls/3 {
		t.Fatalf("sources %v, %d Redis calls for %d decisions: the global part was not leased", sources, rcalls, calls)
	}
	t.Logf("sources %v, %d Redis calls", sources, rcalls)
}

// TestLeaseConfig: lease on the memory engine is refused with why, under
// each front end's path.
func TestLeaseConfig(t *testing.T) {
	dir := t.TempDir()
	rl := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(rl, []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 5}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{
		"envoy.lease":                      fmt.Sprintf("envoy: {ratelimit_config: [%q], lease: auto}\n", rl),
		"postgres.rate_limit.global.lease": "postgres: {upstream: 127.0.0.1:5432, rate_limit: {global: {rate: 5/s, lease: auto}}}\n",
	} {
		_, err := config.Parse("t.yaml", []byte("policies: {api: {rate: 1/s}}\n"+body))
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "leases are taken from Redis") {
			t.Errorf("%s on the memory engine: %v", path, err)
		}
	}
}
