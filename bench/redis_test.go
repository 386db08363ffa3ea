package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// redisCallers is how many goroutines decide at once in the Redis family.
const redisCallers = 64

// redisImpls are the Redis engines, each on its own go-redis client to the
// same server. Every client gets PoolSize redisCallers, one connection per
// caller, so that no library waits for a connection (go-redis's default is
// 10 per core, 20 here, which would queue the one-request-per-call peers).
var redisImpls = []struct {
	name string
	new  func(tb testing.TB, client *redis.Client, q quota) engine
}{
	{"floodgate", newFloodgateRedis},
	{"floodgate-leased", newFloodgateLeased},
	{"redis_rate", newRedisRate},
	{"ulule", newUluleRedis},
}

func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: redisCallers})
}

// --- floodgate redisstore ---------------------------------------------------

type floodgateRedis struct {
	store  *redisstore.Store
	leases *lease.Store // nil: every decision asks Redis
	lim    *floodgate.PolicyLimiter
}

func newFloodgateRedis(tb testing.TB, client *redis.Client, q quota) engine {
	return newFloodgateOn(tb, client, q, false)
}

// newFloodgateLeased decides from blocks leased from Redis (package
// lease, its defaults): a hot key asks Redis once a block, a key seen
// rarely on every decision, as without leases.
func newFloodgateLeased(tb testing.TB, client *redis.Client, q quota) engine {
	return newFloodgateOn(tb, client, q, true)
}

func newFloodgateOn(tb testing.TB, client *redis.Client, q quota, leased bool) engine {
	tb.Helper()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	e := &floodgateRedis{store: store}
	var decider floodgate.Store = store
	if leased {
		if e.leases, err = lease.New(store, lease.Options{}); err != nil {
			tb.Fatal(err)
		}
		decider = e.leases
	}
	lim, err := floodgate.New(decider, floodgate.Policy{
		Name:   "bench",
		Limits: []floodgate.Limit{{Rate: q.rate, Period: q.period}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	e.lim = lim
	return e
}

func (e *floodgateRedis) allow(key string) (bool, error) {
	r, err := floodgate.Allow(bg, e.lim, key)
	return r.Allowed, err
}

func (e *floodgateRedis) close() {
	if e.leases != nil {
		e.leases.Close() // before the Redis store: unused units go back
	}
	e.store.Close()
}

// --- go-redis/redis_rate v10 ------------------------------------------------

type redisRateEngine struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
}

func newRedisRate(_ testing.TB, client *redis.Client, q quota) engine {
	return &redisRateEngine{
		l:     redis_rate.NewLimiter(client),
		limit: redis_rate.Limit{Rate: int(q.rate), Burst: int(q.rate), Period: q.period},
	}
}

func (e *redisRateEngine) allow(key string) (bool, error) {
	r, err := e.l.Allow(bg, key, e.limit)
	if err != nil {
		return false, err
	}
	return r.Allowed > 0, nil
}

func (e *redisRateEngine) close() {}

// --- ulule/limiter v3 redis store -------------------------------------------

func newUluleRedis(tb testing.TB, client *redis.Client, q quota) engine {
	tb.Helper()
	store, err := ululeredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: "ulule"})
	if err != nil {
		tb.Fatal(err)
	}
	return &ululeEngine{l: ulule.New(store, ulule.Rate{Period: q.period, Limit: q.rate})}
}

// runCallers times b.N decisions made by callers goroutines, each deciding
// one key after another as fast as its answers come (a closed loop), and
// reports throughput and the latency each caller saw.
func runCallers(b *testing.B, e engine, keys []string, callers int) {
	b.Helper()
	mask := len(keys) - 1
	lat := make([]time.Duration, b.N)
	var next, allowed, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			i := int(splitmix(uint64(c))) & mask
			var a, ne int64
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					break
				}
				t0 := time.Now()
				ok, err := e.allow(keys[i])
				lat[n-1] = time.Since(t0)
				if ok {
					a++
				}
				if err != nil {
					ne++
					firstErr.CompareAndSwap(nil, err)
				}
				i = (i + stride) & mask
			}
			allowed.Add(a)
			errs.Add(ne)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	if n := errs.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(b.N), "errors/op")
		b.Errorf("%d errors, first: %v", n, firstErr.Load())
	}
}

// BenchmarkRedis compares the Redis engines: 64 concurrent callers against
// one local redis-server that this benchmark starts, on 65,536 keys with the
// quota of the in-memory 64k workload (every decision allowed).
func BenchmarkRedis(b *testing.B) {
	srv := testkit.Redis(b)
	keys := ipKeys(1 << 16)
	for _, im := range redisImpls {
		b.Run("impl="+im.name+"/callers=64", func(b *testing.B) {
			client := newRedisClient(srv.Addr)
			defer client.Close()
			e := im.new(b, client, throughputQuota)
			defer e.close()
			// One decision first, so that script loading is not timed.
			if _, err := e.allow(keys[0]); err != nil {
				b.Fatal(err)
			}
			runCallers(b, e, keys, redisCallers)
		})
	}
}

// BenchmarkRedisHotKey is BenchmarkRedis on one key, the workload leases
// are for: 64 callers deciding one client's requests, under a quota that
// admits them all (a million a second: one unit a microsecond, the Redis
// engine's clock tick).
func BenchmarkRedisHotKey(b *testing.B) {
	srv := testkit.Redis(b)
	keys := ipKeys(1)
	for _, im := range redisImpls {
		b.Run("impl="+im.name+"/callers=64", func(b *testing.B) {
			client := newRedisClient(srv.Addr)
			defer client.Close()
			e := im.new(b, client, quota{rate: 1_000_000, period: time.Second})
			defer e.close()
			if _, err := e.allow(keys[0]); err != nil {
				b.Fatal(err)
			}
			runCallers(b, e, keys, redisCallers)
		})
	}
}

// TestRedisEnginesLimit checks that every Redis adapter really limits: a key
// gets its burst and no more, another key is not affected.
func TestRedisEnginesLimit(t *testing.T) {
	srv := testkit.Redis(t)
	for _, im := range redisImpls {
		t.Run(im.name, func(t *testing.T) {
			client := newRedisClient(srv.Addr)
			defer client.Close()
			if err := client.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			e := im.new(t, client, quota{rate: 5, period: time.Hour})
			defer e.close()
			for i := range 5 {
				if ok, err := e.allow("a"); !ok || err != nil {
					t.Fatalf("request %d: allowed=%v err=%v, want allowed", i+1, ok, err)
				}
			}
			if ok, err := e.allow("a"); ok || err != nil {
				t.Fatalf("request 6: allowed=%v err=%v, want denied", ok, err)
			}
			if ok, err := e.allow("b"); !ok || err != nil {
				t.Fatalf("other key: allowed=%v err=%v, want allowed", ok, err)
			}
		})
	}
}
