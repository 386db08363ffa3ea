package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testkit"
)

// BenchmarkRedisCost measures what a decision costs Redis, the shared part
// of a fleet of limiters: redis-server's CPU time per decision (user and
// system, from /proc, so reading and writing sockets count) and the time
// its commands ran (INFO commandstats), for each algorithm and for a
// request decided on two policies at once, as an Envoy request with two
// descriptors is. 64 callers, each on keys of its own.
func BenchmarkRedisCost(b *testing.B) {
	perMicro := floodgate.Limit{Rate: 1_000_000, Period: time.Second}
	for _, bc := range []struct {
		name     string
		policies [][]floodgate.Limit // each call decides one key on every policy, at once
	}{
		{"gcra", [][]floodgate.Limit{{perMicro}}},
		{"fixed-window", [][]floodgate.Limit{{perMicro.WithAlgorithm(floodgate.FixedWindow)}}},
		{"sliding-window", [][]floodgate.Limit{{perMicro.WithAlgorithm(floodgate.SlidingWindow)}}},
		{"fixed-window-2-policies", [][]floodgate.Limit{{perMicro.WithAlgorithm(floodgate.FixedWindow)}, {perMicro.WithAlgorithm(floodgate.FixedWindow)}}},
		{"gcra-3-limits", [][]floodgate.Limit{{perMicro, floodgate.PerHour(1 << 40).WithAlgorithm(floodgate.FixedWindow), floodgate.PerDay(8_640_000_000)}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := testkit.Redis(b)
			client := newClient(b, srv.Addr)
			s, err := New(client, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var lims []floodgate.Limiter
			for i, limits := range bc.policies {
				lim, err := floodgate.New(s, floodgate.Policy{Name: fmt.Sprint("p", i), Limits: limits})
				if err != nil {
					b.Fatal(err)
				}
				lims = append(lims, lim)
			}
			decide := func(ctx context.Context, key string) error {
				if len(lims) == 1 {
					_, err := floodgate.Allow(ctx, lims[0], key)
					return err
				}
				var wg sync.WaitGroup
				errs := make([]error, len(lims))
				for i, lim := range lims {
					wg.Go(func() { _, errs[i] = floodgate.Allow(ctx, lim, key) })
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						return err
					}
				}
				return nil
			}
			if err := decide(context.Background(), "warm"); err != nil {
				b.Fatal(err)
			}
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			cpu0 := testkit.ProcessCPU(b, srv.Pid())
			benchParallel(b, decide)
			cpu := testkit.ProcessCPU(b, srv.Pid()) - cpu0
			usec, calls := commandStats(b, srv)
			n := float64(b.N * len(lims))
			b.ReportMetric(float64(cpu.Microseconds())/n, "redis-cpu-µs/decision")
			b.ReportMetric(usec/n, "redis-cmd-µs/decision")
			b.ReportMetric(calls/n, "redis-cmds/decision")
		})
	}
}

// commandStats sums the microseconds and calls of every command in INFO
// commandstats.
func commandStats(b *testing.B, srv *testkit.RedisServer) (usec, calls float64) {
	b.Helper()
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	text, _ := v.(string)
	for line := range strings.SplitSeq(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config" {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, val, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(val, 64)
			switch k {
			case "calls":
				calls += f
			case "usec":
				usec += f
			}
		}
	}
	return usec, calls
}
