package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testkit"
)

// outcome is what one call answered: an HTTP status and the Result's
// source, or the Envoy code and the source header.
type outcome struct {
	code   string
	source string
}

// load runs n callers of f, each calling it calls times, and counts the
// outcomes.
func load(n, calls int, f func(i int) outcome) map[outcome]int {
	var mu sync.Mutex
	counts := map[outcome]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for j := range calls {
				o := f(i*calls + j)
				mu.Lock()
				counts[o]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return counts
}

// Redis killed under load: every call still gets an answer, the one the
// failure policy promises, from the check API and the Envoy API alike; and a
// Redis that hangs is answered the same way.
func TestRedisDownFailurePolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("a long test; make test runs it")
	}
	for _, tc := range []struct {
		mode      string
		http      outcome
		envoy     outcome
		hangHTTP  outcome
		hangEnvoy outcome
	}{
		{"fail_closed", outcome{"503", "fail-closed"}, outcome{"OVER_LIMIT", "fail-closed"}, outcome{"503", "fail-closed"}, outcome{"OVER_LIMIT", "fail-closed"}},
		{"fail_open", outcome{"200", "fail-open"}, outcome{"OK", ""}, outcome{"200", "fail-open"}, outcome{"OK", ""}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv := testkit.Redis(t)
			dir := t.TempDir()
			rules := filepath.Join(dir, "rl.yaml")
			if err := os.WriteFile(rules, []byte("domain: d\ndescriptors: [{key: k, value: v, rate_limit: {unit: second, requests_per_unit: 1000000}}]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			d := started(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: %s, timeout: 300ms}
policies: {api: {rate: 1000000/s}}
check: {listen: 127.0.0.1:0}
envoy: {listen: 127.0.0.1:0, ratelimit_config: [%q]}
admin: {listen: ""}
`, srv.Addr, tc.mode, rules))
			addrs := d.Addrs()
			hc := &http.Client{Timeout: 20 * time.Second}
			checkURL := "http://" + addrs.Check.String() + "/v1/check"
			checkCall := func(i int) outcome {
				resp, err := hc.Post(checkURL, "application/json", strings.NewReader(fmt.Sprintf(`{"policy":"api","key":"k%d"}`, i%64)))
				if err != nil {
					return outcome{"error: " + err.Error(), ""}
				}
				defer resp.Body.Close()
				var m struct{ Source string }
				json.NewDecoder(resp.Body).Decode(&m)
				return outcome{fmt.Sprint(resp.StatusCode), m.Source}
			}
			conn, err := grpc.NewClient(addrs.Envoy.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			rc := rlsv3.NewRateLimitServiceClient(conn)
			desc := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}
			envoyCall := func(i int) outcome {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				resp, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc}})
				if err != nil {
					return outcome{"error: " + err.Error(), ""}
				}
				src := ""
				for _, h := range resp.ResponseHeadersToAdd {
					if h.Key == "x-ratelimit-source" {
						src = h.Value
					}
				}
				return outcome{resp.OverallCode.String(), src}
			}

			// The first call dials and loads the script; on a loaded
			// machine it may outlast the engine timeout.
			testkit.Eventually(t, 20*time.Second, "a decision by redis", func() bool { return checkCall(0).source == "redis" })
			up := load(4, 20, checkCall)
			if up[outcome{"200", "redis"}] != 80 {
				t.Fatalf("check API with Redis up: %v", up)
			}
			if up := load(4, 20, envoyCall); up[outcome{"OK", ""}] != 80 {
				t.Fatalf("Envoy API with Redis up: %v", up)
			}

			// Hung: every command held for longer than the test runs.
			srv.Pause(time.Minute)
			if got := load(4, 10, checkCall); got[tc.hangHTTP] != 40 {
				t.Errorf("check API with Redis hung: %v, want 40× %v", got, tc.hangHTTP)
			}
			if got := load(4, 10, envoyCall); got[tc.hangEnvoy] != 40 {
				t.Errorf("Envoy API with Redis hung: %v, want 40× %v", got, tc.hangEnvoy)
			}

			// Killed under load: the callers run while the server dies.
			var killed sync.WaitGroup
			killed.Go(func() {
				load(4, 25, checkCall)
			})
			srv.Kill()
			killed.Wait()
			if got := load(4, 25, checkCall); got[tc.http] != 100 {
				t.Errorf("check API with Redis killed: %v, want 100× %v", got, tc.http)
			}
			if got := load(4, 25, envoyCall); got[tc.envoy] != 100 {
				t.Errorf("Envoy API with Redis killed: %v, want 100× %v", got, tc.envoy)
			}
		})
	}
}

// TestBreakerTransitionsLogged: when Redis dies the log says the breaker
// opened, for which engine, why (the failures and the last error) and
// what decides meanwhile; when it is back,
// that it closed.
func TestBreakerTransitionsLogged(t *testing.T) {
	srv := testkit.Redis(t)
	logs := &testkit.Buffer{}
	d, err := New(mustParse(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: fail_open, timeout: 200ms, breaker: {min_calls: 2, backoff: 100ms, max_backoff: 200ms}}
policies: {api: {rate: 1000/s}}
check: {listen: 127.0.0.1:0}
admin: {listen: ""}
`, srv.Addr)), Options{LogOutput: logs})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	lim := d.cur.Load().limiters["api"]
	testkit.Eventually(t, 20*time.Second, "a decision by redis", func() bool {
		res, err := floodgate.Allow(context.Background(), lim, "k")
		return err == nil && res.Source == "redis"
	})
	srv.Kill()
	testkit.Eventually(t, 20*time.Second, "the breaker's opening logged", func() bool {
		floodgate.Allow(context.Background(), lim, "k")
		return strings.Contains(logs.String(), `level=WARN msg="circuit breaker open" engine=redis failure_mode=fail_open from=closed to=open reason="`) &&
			strings.Contains(logs.String(), "connection refused") &&
			strings.Contains(logs.String(), `detail="allowing every request until Redis is back"`)
	})
	srv.Restart()
	testkit.Eventually(t, 20*time.Second, "the breaker's closing logged", func() bool {
		floodgate.Allow(context.Background(), lim, "k")
		return strings.Contains(logs.String(), `msg="circuit breaker closed" engine=redis`)
	})
}
