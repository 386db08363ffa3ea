package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
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
// rueidis-gcra opens a rueidis client of its own to the same address and
// leaves the go-redis client unused.
var redisImpls = []struct {
	name string
	new  func(tb testing.TB, client *redis.Client, q quota) engine
}{
	{"floodgate", newFloodgateRedis},
	{"floodgate-leased", newFloodgateLeased},
	{"redis_rate", newRedisRate},
	{"ulule", newUluleRedis},
	{"rueidis-gcra", newRueidisGCRA},
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

// --- redis/rueidis, one GCRA script per decision -----------------------------

// gcraScript is a minimal GCRA: KEYS[1] holds the theoretical arrival time
// (TAT) in microseconds of the server's clock; ARGV[1] is the emission
// interval and ARGV[2] the burst tolerance, both in microseconds. A request
// is allowed when the TAT it would leave is at most the tolerance ahead of
// now; the key expires when that TAT is reached. It returns 1 (allowed) or
// 0 (denied, nothing stored).
var gcraScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + interval
if new - now > tolerance then return 0 end
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000))
return 1
`)

// rueidisGCRA sends one script call (EVALSHA) per decision through a rueidis
// client, whose automatic pipelining writes the calls of concurrent callers
// to one connection together: one script run per decision on the server,
// but no round trip of its own for each.
type rueidisGCRA struct {
	client rueidis.Client
	args   []string // interval, tolerance
}

func newRueidisGCRA(tb testing.TB, client *redis.Client, q quota) engine {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{client.Options().Addr},
		DisableCache: true,
	})
	if err != nil {
		tb.Fatal(err)
	}
	interval := q.period.Microseconds() / q.rate
	return &rueidisGCRA{client: c, args: []string{
		strconv.FormatInt(interval, 10),
		strconv.FormatInt(interval*q.rate, 10), // a burst of q.rate
	}}
}

func (e *rueidisGCRA) allow(key string) (bool, error) {
	n, err := gcraScript.Exec(bg, e.client, []string{"gcra:" + key}, e.args).AsInt64()
	return n == 1, err
}

func (e *rueidisGCRA) close() { e.client.Close() }

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
// engine's clock tick). redis-cpu-us/op is the redis-server process's CPU
// time (INFO cpu) over the timed decisions, per decision.
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
			before := redisCPU(b, client)
			runCallers(b, e, keys, redisCallers)
			cpu := redisCPU(b, client) - before
			b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "redis-cpu-us/op")
		})
	}
}

// redisCPU is the CPU time (user and system) the redis-server process has
// used so far, from INFO cpu.
func redisCPU(tb testing.TB, client *redis.Client) time.Duration {
	tb.Helper()
	info, err := client.Info(bg, "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum time.Duration
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %s: %v", line, err)
		}
		sum += time.Duration(s * float64(time.Second))
	}
	if sum == 0 {
		tb.Fatalf("INFO cpu: no used_cpu_sys or used_cpu_user in %q", info)
	}
	return sum
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
