package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/testkit"
)

// starve keeps every CPU of the machine busy until t ends: two busy-loop
// processes per CPU, as many as the machine has again in busy goroutines of
// this process, all at the same priority as redis-server and the daemon.
// Each process is bounded by timeout(1) as well, so none outlives a test
// that dies.
func starve(t *testing.T, limit time.Duration) {
	t.Helper()
	sh := testkit.RequireBinary(t, "sh", "dash")
	bound := testkit.RequireBinary(t, "timeout", "coreutils")
	var procs []*exec.Cmd
	for range 2 * runtime.NumCPU() {
		cmd := exec.Command(bound, fmt.Sprintf("%ds", int(limit/time.Second)+1), sh, "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for n := 0; ; n++ {
				if n%(1<<16) == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		for _, p := range procs {
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			_ = p.Wait()
		}
	})
}

// TestStarvedCPUDeniesNothing: the two-descriptor Envoy workload against a
// real redis-server while every CPU of the machine runs busy loops. No
// limit can deny (each allows a million a second), so every answer must be
// OK, decided by Redis, under each failure mode: a starved machine makes
// calls slow, and a slow call is not a dead Redis. The defaults are those
// of the library, so this is what an operator who sets nothing gets.
func TestStarvedCPUDeniesNothing(t *testing.T) {
	const (
		callers  = 32
		duration = 3 * time.Second
	)
	for _, mode := range []string{"fail_open", "fail_closed", "local_fallback"} {
		t.Run(mode, func(t *testing.T) {
			srv := testkit.Redis(t)
			rules := filepath.Join(t.TempDir(), "rl.yaml")
			if err := os.WriteFile(rules, []byte(`domain: d
descriptors:
  - {key: user, rate_limit: {unit: second, requests_per_unit: 1000000}}
  - {key: path, rate_limit: {unit: second, requests_per_unit: 1000000}}
`), 0o644); err != nil {
				t.Fatal(err)
			}
			d := started(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: %s}
envoy: {listen: 127.0.0.1:0, ratelimit_config: [%q]}
admin: {listen: ""}
`, srv.Addr, mode, rules))
			conn, err := grpc.NewClient(d.Addrs().Envoy.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			rc := rlsv3.NewRateLimitServiceClient(conn)
			call := func(i int) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				resp, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprint("u", i%64)}}},
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: fmt.Sprint("/p", i%8)}}},
				}})
				if err != nil {
					return "", err
				}
				for _, st := range resp.Statuses {
					// A status without a current limit was not decided on
					// Redis's state (fail-open claims none).
					if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() == nil {
						return resp.String(), nil
					}
				}
				if resp.OverallCode != rlsv3.RateLimitResponse_OK {
					return resp.String(), nil
				}
				return "", nil
			}
			// The first call dials and loads the script.
			testkit.Eventually(t, 20*time.Second, "a decision by redis", func() bool {
				bad, err := call(0)
				return err == nil && bad == ""
			})
			before := d.engine.guard.Stats()

			starve(t, duration+30*time.Second)
			var mu sync.Mutex
			calls, wrong := 0, map[string]int{}
			end := time.Now().Add(duration)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for i := c; time.Now().Before(end); i += callers {
						bad, err := call(i)
						mu.Lock()
						calls++
						switch {
						case err != nil:
							wrong["error: "+err.Error()]++
						case bad != "":
							wrong[bad]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			st := d.engine.guard.Stats()
			t.Logf("%s: %d calls, %d engine calls, %d slow (answered after %s), %d failed, %d timed out, %d skipped, opened %d times",
				mode, calls, st.Calls-before.Calls, st.Slow-before.Slow, d.engine.guard.Timeout(), st.Failures.Decide-before.Failures.Decide,
				st.Timeouts-before.Timeouts, st.Skipped-before.Skipped, st.Opened-before.Opened)
			if calls == 0 {
				t.Fatal("no call completed")
			}
			if len(wrong) > 0 {
				n := 0
				var some []string
				for w, c := range wrong {
					n += c
					if len(some) < 3 {
						some = append(some, fmt.Sprintf("%d× %s", c, w))
					}
				}
				t.Errorf("%d of %d calls were not OK by Redis although no limit denies; e.g.\n%s", n, calls, strings.Join(some, "\n"))
			}
			if st.Opened != before.Opened || st.State != failover.Closed {
				t.Errorf("the breaker opened %d times (now %s) with Redis up", st.Opened-before.Opened, st.State)
			}
		})
	}
}
