package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// A quota is the one limit every implementation of a workload gets: Rate
// units per Period, with a burst of Rate (each library's way of saying so).
type quota struct {
	rate   int64
	period time.Duration
}

var (
	// throughputQuota is the limit of the hot-key and 64k-key workloads. On
	// 64k keys every decision is allowed (a key sees a few hundred decisions
	// per second, far below its burst) and every key carries state for the
	// whole run, so no sweeper may drop it and each decision finds its key.
	// The hot key exhausts its burst within milliseconds and is then mostly
	// denied (about 28 refills/s): that workload measures contention on one
	// key's state, through the denial path. The allowed/op metric shows the
	// mix.
	throughputQuota = quota{rate: 100_000, period: time.Hour}

	// liveQuota is the limit of the 1M-key workload, a daily quota: one unit
	// is 86.4 s of debt, so every key is live (it carries information that
	// no engine may drop) for the whole measurement.
	liveQuota = quota{rate: 1000, period: 24 * time.Hour}
)

// An engine is one in-memory rate limiter, adapted to one call.
type engine interface {
	allow(key string) (bool, error)
	close()
}

type impl struct {
	name string
	new  func(tb testing.TB, q quota) engine
}

// memImpls are the in-memory implementations, each set up as its README
// shows, with the quota and nothing else changed.
var memImpls = []impl{
	{"floodgate", newFloodgateMem},
	{"xrate", newXRate},
	{"sethvargo", newSethvargo},
	{"ulule", newUluleMem},
	{"throttled", newThrottled},
}

var bg = context.Background()

// --- floodgate: floodgate.New(memstore.New(...), policy).Allow -------------

type floodgateEngine struct {
	store *memstore.Store
	lim   *floodgate.PolicyLimiter
}

func newFloodgateMem(tb testing.TB, q quota) engine {
	tb.Helper()
	store := memstore.New(memstore.Options{})
	lim, err := floodgate.New(store, floodgate.Policy{
		Name:   "bench",
		Limits: []floodgate.Limit{{Rate: q.rate, Period: q.period}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &floodgateEngine{store: store, lim: lim}
}

func (e *floodgateEngine) allow(key string) (bool, error) {
	r, err := floodgate.Allow(bg, e.lim, key)
	return r.Allowed, err
}

func (e *floodgateEngine) close() { e.store.Close() }

// --- x/time/rate: map[string]*rate.Limiter behind a sync.RWMutex ------------

// xrateMap is the per-key limiter most Go services write by hand: a read
// lock for the lookup, the write lock only to add a missing key.
type xrateMap struct {
	mu    sync.RWMutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newXRate(_ testing.TB, q quota) engine {
	return &xrateMap{
		m:     make(map[string]*rate.Limiter),
		limit: rate.Every(q.period / time.Duration(q.rate)),
		burst: int(q.rate),
	}
}

func (x *xrateMap) allow(key string) (bool, error) {
	x.mu.RLock()
	l, ok := x.m[key]
	x.mu.RUnlock()
	if !ok {
		x.mu.Lock()
		if l, ok = x.m[key]; !ok {
			l = rate.NewLimiter(x.limit, x.burst)
			x.m[key] = l
		}
		x.mu.Unlock()
	}
	return l.Allow(), nil
}

func (x *xrateMap) close() {}

// --- sethvargo/go-limiter memorystore ---------------------------------------

type sethvargoEngine struct{ s sethvargo.Store }

func newSethvargo(tb testing.TB, q quota) engine {
	tb.Helper()
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.rate), Interval: q.period})
	if err != nil {
		tb.Fatal(err)
	}
	return &sethvargoEngine{s: s}
}

func (e *sethvargoEngine) allow(key string) (bool, error) {
	_, _, _, ok, err := e.s.Take(bg, key)
	return ok, err
}

func (e *sethvargoEngine) close() { e.s.Close(bg) }

// --- ulule/limiter v3 memory store ------------------------------------------

type ululeEngine struct{ l *ulule.Limiter }

func newUluleMem(_ testing.TB, q quota) engine {
	return &ululeEngine{l: ulule.New(ululemem.NewStore(), ulule.Rate{Period: q.period, Limit: q.rate})}
}

func (e *ululeEngine) allow(key string) (bool, error) {
	c, err := e.l.Get(bg, key)
	return !c.Reached, err
}

func (e *ululeEngine) close() {}

// --- throttled/throttled v2 memstore, GCRA rate limiter ---------------------

type throttledEngine struct{ l *throttled.GCRARateLimiterCtx }

// newThrottled uses memstore.NewCtx(0): a plain map with no key bound. The
// README's example bounds it with an LRU (NewCtx(65536)), whose every lookup
// takes a global lock and which could not hold the 1M-key workload; the
// unbounded map is the faster of its two modes.
func newThrottled(tb testing.TB, q quota) engine {
	tb.Helper()
	st, err := throttledmem.NewCtx(0)
	if err != nil {
		tb.Fatal(err)
	}
	// throttled's burst counts the requests beyond the first: MaxBurst+1
	// requests pass at once.
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(q.rate), q.period),
		MaxBurst: int(q.rate) - 1,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &throttledEngine{l: l}
}

func (e *throttledEngine) allow(key string) (bool, error) {
	limited, _, err := e.l.RateLimitCtx(bg, key, 1)
	return !limited, err
}

func (e *throttledEngine) close() {}

// --- workloads --------------------------------------------------------------

// ipKey is the i-th key, an IPv4 address as a per-IP middleware would use:
// 10.0.0.0 upwards.
func ipKey(i int) string {
	var buf [16]byte
	b := append(buf[:0], "10."...)
	b = strconv.AppendInt(b, int64(i>>16&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(i>>8&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(i&0xff), 10)
	return string(b)
}

func ipKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = ipKey(i)
	}
	return keys
}

// stride walks a power-of-two key set in a scattered order: it is odd, so
// it visits every key once per cycle.
const stride = 0x9e3779b1

// shuffled returns 0..n-1 in a fixed pseudo-random order.
func shuffled(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// runParallel times b.N decisions on keys (a power-of-two set) from
// GOMAXPROCS goroutines, each starting at its own offset and walking the
// keys in order.
//
// The keys are precomputed and walked in order so that fetching one costs
// no cache miss, as for a server that has just built the key from the
// request in hand; with a scattered walk, the benchmark's own misses (the
// string header, then its bytes) cost as much as a limiter's lookup and
// hide the differences between limiters. The engines' state is still
// touched in a scattered order: every engine had its keys inserted in a
// shuffled order (see shuffled), so the order of keys in memory tells
// nothing about where their state lies.
//
// It works as b.RunParallel does, with one difference: b.RunParallel counts
// iterations down in a testing.PB, a 32-byte heap object written on every
// iteration, and the PBs of two goroutines can share a cache line. When
// they do, every decision pays a cache-line transfer between cores (on
// this machine about 50 ns/op, added at random to some runs: floodgate's
// 64k workload measured 118 or 170 ns/op, nothing between). Here each
// goroutine counts on its own stack and takes work from a shared counter
// in chunks.
func runParallel(b *testing.B, e engine, keys []string) {
	b.Helper()
	mask := len(keys) - 1
	var next, allowed, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for w := range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			i := int(splitmix(uint64(w))) & mask
			var a, ne int64
			for n := claim(&next, b.N); n > 0; n = claim(&next, b.N) {
				for range n {
					ok, err := e.allow(keys[i])
					if ok {
						a++
					}
					if err != nil {
						ne++
						firstErr.CompareAndSwap(nil, err)
					}
					i = (i + 1) & mask
				}
			}
			allowed.Add(a)
			errs.Add(ne)
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	if n := errs.Load(); n > 0 {
		// Reported, not fatal: a limiter that errs under contention (throttled
		// gives up after 10 failed compare-and-swaps) is a result too.
		b.ReportMetric(float64(n)/float64(b.N), "errors/op")
		b.Logf("%d errors, first: %v", n, firstErr.Load())
	}
}

// chunk is how many iterations a goroutine of runParallel takes at once.
const chunk = 256

// claim takes up to chunk of the total iterations from next and returns how
// many it got: 0 when all are taken.
func claim(next *atomic.Int64, total int) int {
	start := next.Add(chunk) - chunk
	return int(max(0, min(chunk, int64(total)-start)))
}

// cpuTime is the CPU time this process has used, user and system, in
// nanoseconds. Its difference over a benchmark is the cpu-ns/op metric: the
// CPU one decision costs, all goroutines included (janitors, clocks, GC).
// Unlike ns/op it does not grow when other processes take the machine's
// cores, so it cross-checks ratios measured on a shared machine; it does
// not see time a limiter spends blocked on a lock, which ns/op does.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// BenchmarkMemory compares the in-memory engines on three workloads, every
// implementation of a workload in turn:
//
//   - keys=1: one hot key, decided from every core.
//   - keys=64k: 65,536 keys, all present before the timer starts.
//   - keys=1M: 1,048,576 live keys. Before timing, the engine is built and
//     filled, and B/key is the live heap it added (HeapAlloc after a GC,
//     after minus before, over the key count). Keys are built one by one as
//     a server builds them from a request and not kept by the benchmark, so
//     an engine that keeps the key string pays for its bytes.
func BenchmarkMemory(b *testing.B) {
	hot := []string{ipKey(1)}
	keys64k := ipKeys(1 << 16)
	for _, im := range memImpls {
		b.Run("impl="+im.name+"/keys=1", func(b *testing.B) {
			e := im.new(b, throughputQuota)
			defer e.close()
			runParallel(b, e, hot)
		})
	}
	for _, im := range memImpls {
		b.Run("impl="+im.name+"/keys=64k", func(b *testing.B) {
			e := im.new(b, throughputQuota)
			defer e.close()
			for _, i := range shuffled(len(keys64k)) {
				if _, err := e.allow(keys64k[i]); err != nil {
					b.Fatal(err)
				}
			}
			runParallel(b, e, keys64k)
		})
	}
	for _, im := range memImpls {
		b.Run("impl="+im.name+"/keys=1M", func(b *testing.B) {
			f := live.get(b, im)
			runParallel(b, f.e, f.keys)
			// After runParallel: its ResetTimer clears reported metrics.
			b.ReportMetric(f.bytesPerKey, "B/key")
		})
	}
	live.drop()
}

const liveKeys = 1 << 20

// liveFill is an engine holding liveKeys live keys and what they cost.
type liveFill struct {
	name        string
	e           engine
	keys        []string
	bytesPerKey float64
}

// liveCache keeps one filled engine across the b.N ramp of one benchmark
// (filling takes seconds); each -count repetition starts with b.N == 1 and
// fills and measures afresh.
type liveCache struct{ cur *liveFill }

var live liveCache

func (c *liveCache) drop() {
	if c.cur != nil {
		c.cur.e.close()
		c.cur = nil
	}
}

func (c *liveCache) get(b *testing.B, im impl) *liveFill {
	b.Helper()
	if c.cur != nil && c.cur.name == im.name && b.N > 1 {
		return c.cur
	}
	b.StopTimer()
	c.drop()
	order := shuffled(liveKeys) // allocated before measuring: not counted
	before := liveHeap()
	e := im.new(b, liveQuota)
	for _, i := range order {
		ok, err := e.allow(ipKey(i))
		if err != nil || !ok {
			b.Fatalf("%s: first decision for key %d: allowed=%v err=%v", im.name, i, ok, err)
		}
	}
	after := liveHeap()
	runtime.KeepAlive(order)
	if fe, ok := e.(*floodgateEngine); ok {
		// Every key must still be held, or B/key would flatter floodgate.
		if n := fe.store.Len(); n != liveKeys || fe.store.Evictions() != 0 {
			b.Fatalf("floodgate holds %d entries (%d evicted), want %d", n, fe.store.Evictions(), liveKeys)
		}
	}
	c.cur = &liveFill{
		name:        im.name,
		e:           e,
		keys:        ipKeys(liveKeys),
		bytesPerKey: float64(int64(after)-int64(before)) / liveKeys,
	}
	runtime.KeepAlive(e)
	b.StartTimer()
	return c.cur
}

// liveHeap is the heap still reachable after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemEnginesLimit checks that every adapter really limits: a key gets
// its burst and no more, and another key is not affected.
func TestMemEnginesLimit(t *testing.T) {
	for _, im := range memImpls {
		t.Run(im.name, func(t *testing.T) {
			e := im.new(t, quota{rate: 5, period: time.Hour})
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

// TestIPKey pins the key format the workloads use.
func TestIPKey(t *testing.T) {
	for i, want := range map[int]string{0: "10.0.0.0", 1: "10.0.0.1", 65535: "10.0.255.255", 1<<20 - 1: "10.15.255.255"} {
		if got := ipKey(i); got != want {
			t.Errorf("ipKey(%d) = %q, want %q", i, got, want)
		}
	}
	if got := fmt.Sprint(len(ipKeys(1 << 16))); got != "65536" {
		t.Errorf("ipKeys(1<<16) has %s keys", got)
	}
}
