package redisstore

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testkit"
)

// benchCallers is the number of goroutines calling Decide at once.
const benchCallers = 64

// BenchmarkDecide measures decisions per second and their latency with 64
// callers against one local redis-server: batched (the default), unbatched
// (one script call per decision, many in flight, as redis_rate does with a
// connection pool), and batched with a policy of three limits.
func BenchmarkDecide(b *testing.B) {
	client := standalone(b)
	perMicro := floodgate.Limit{Rate: 1_000_000, Period: time.Second}
	for _, bc := range []struct {
		name   string
		o      Options
		limits []floodgate.Limit
	}{
		{"batched", Options{}, []floodgate.Limit{perMicro}},
		{"unbatched", Options{MaxBatch: 1, Flushers: benchCallers}, []floodgate.Limit{perMicro}},
		{"batched-3-limits", Options{}, []floodgate.Limit{perMicro, floodgate.PerHour(1 << 40).WithAlgorithm(floodgate.FixedWindow), floodgate.PerDay(8_640_000_000)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.o.Prefix = "bench:" + bc.name + ":"
			benchStore(b, client, bc.o, bc.limits)
		})
	}
}

// BenchmarkDecideCluster is BenchmarkDecide/batched against a Redis
// Cluster of three masters, all on this machine: each user's keys live in
// their own slot, so a batch is split into one script call per slot.
func BenchmarkDecideCluster(b *testing.B) {
	cl := testkit.RedisCluster(b, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	defer client.Close()
	benchStore(b, client, Options{}, []floodgate.Limit{{Rate: 1_000_000, Period: time.Second}})
}

func benchStore(b *testing.B, client redis.UniversalClient, o Options, limits []floodgate.Limit) {
	s, err := New(client, o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim, err := floodgate.New(s, floodgate.Policy{Name: "bench", Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	benchParallel(b, func(ctx context.Context, key string) error {
		_, err := floodgate.Allow(ctx, lim, key)
		return err
	})
}

// benchParallel runs op from benchCallers goroutines, each on keys of its
// own, and reports decisions/s and latency percentiles.
func benchParallel(b *testing.B, op func(ctx context.Context, key string) error) {
	var worker atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism((benchCallers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		w := strconv.FormatInt(worker.Add(1), 10)
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = "user:" + w + ":" + strconv.Itoa(i)
		}
		mine := make([]time.Duration, 0, 1024)
		for i := 0; pb.Next(); i++ {
			t0 := time.Now()
			if err := op(ctx, keys[i%len(keys)]); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
