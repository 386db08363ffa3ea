package lease_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/testkit"
)

// BenchmarkHotKey decides one hot key from 64 callers on one
// redis-server, exactly (every decision a script call) and leased, and
// reports the decisions per second and redis-server's CPU per decision
// (user and system, from /proc). The limit is high enough never to deny,
// so both decide the same traffic.
func BenchmarkHotKey(b *testing.B) {
	l := floodgate.Limit{Rate: 1_000_000_000, Period: 1000 * time.Second} // 1µs a unit
	for _, bc := range []struct {
		name     string
		maxLease int64 // 0: exact, no lease
	}{{"exact", 0}, {"leased-max1000", 1000}, {"leased-max10000", 10_000}} {
		leased := bc.maxLease > 0
		b.Run(bc.name, func(b *testing.B) {
			srv := testkit.Redis(b)
			var st floodgate.Store = newRedisStore(b, srv.Addr, "bench:")
			var ls *lease.Store
			if leased {
				var err error
				if ls, err = lease.New(st, lease.Options{MaxLease: bc.maxLease}); err != nil {
					b.Fatal(err)
				}
				defer ls.Close()
				st = ls
			}
			lim, err := floodgate.New(st, floodgate.Policy{Name: "hot", Limits: []floodgate.Limit{l}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := lim.AllowN(ctx, "k", 1); err != nil {
				b.Fatal(err)
			}
			cpu0 := testkit.ProcessCPU(b, srv.Pid())
			start := time.Now()
			b.SetParallelism(64 / max(1, runtimeProcs()))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if res, err := lim.AllowN(ctx, "k", 1); err != nil || !res.Allowed {
						b.Errorf("%+v, %v", res, err)
						return
					}
				}
			})
			elapsed := time.Since(start)
			cpu := testkit.ProcessCPU(b, srv.Pid()) - cpu0
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "redis-cpu-µs/decision")
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
