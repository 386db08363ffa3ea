package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// admission is one allowed decision as the caller saw it: the units passed
// at some instant between call and ret (wall clock, which is the clock
// redis-server's TIME reads on this host).
type admission struct {
	key       string
	call, ret int64
	cost      int64
	leased    bool
}

func newRedisStore(t testing.TB, addr, prefix string) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	rs, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// TestNeverOverLimit runs several lease-holding stores on one redis-server
// against random demand per key and per instance, and checks every
// admission against the exact reference transition: each window's
// admissions within its limit, a sliding window's replay admitted by the
// sliding-window transition, a bucket's replay admitted by a bucket of the
// same rate whose capacity is larger by what a TTL refills (a block's units
// are charged when taken and may be used up to TTL later). It logs the
// under-admission of windows where demand exceeded the limit.
func TestNeverOverLimit(t *testing.T) {
	srv := testkit.Redis(t)
	const instances = 4
	ttl := 300 * time.Millisecond
	cases := []struct {
		name   string
		limits []floodgate.Limit
	}{
		{"gcra", []floodgate.Limit{{Rate: 400, Period: time.Second, Burst: 40}}},
		{"token_bucket", []floodgate.Limit{{Rate: 400, Period: time.Second, Burst: 40, Algorithm: floodgate.TokenBucket}}},
		{"fixed_window", []floodgate.Limit{{Rate: 60, Period: 150 * time.Millisecond, Algorithm: floodgate.FixedWindow}}},
		{"sliding_window", []floodgate.Limit{{Rate: 60, Period: 150 * time.Millisecond, Algorithm: floodgate.SlidingWindow}}},
		{"sliding_log", []floodgate.Limit{{Rate: 60, Period: 150 * time.Millisecond, Algorithm: floodgate.SlidingLog}}},
		{"fixed_and_gcra", []floodgate.Limit{
			{Rate: 80, Period: 200 * time.Millisecond, Algorithm: floodgate.FixedWindow},
			{Rate: 300, Period: time.Second, Burst: 50},
		}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, err := floodgatetest.NewSet("prop", "", c.limits...)
			if err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("prop%d:", ci)
			stores := make([]*lease.Store, instances)
			for i := range stores {
				s, err := lease.New(newRedisStore(t, srv.Addr, prefix), lease.Options{
					TTL: ttl, Horizon: 20 * time.Millisecond, MaxFraction: 0.25, MaxLease: 20,
				})
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = s
			}
			keys := []string{"hot", "warm", "cold"}
			var mu sync.Mutex
			var adm []admission
			var leased int
			ctx := context.Background()
			deadline := time.Now().Add(900 * time.Millisecond)
			var wg sync.WaitGroup
			for i, s := range stores {
				for g := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(ci), uint64(i*16+g)))
						for time.Now().Before(deadline) {
							key := keys[0]
							switch r := rng.IntN(20); {
							case r == 0:
								key = keys[2]
							case r < 5:
								key = keys[1]
							}
							cost := int64(1 + rng.IntN(3)/2)
							call := time.Now().UnixNano()
							v, err := s.Decide(ctx, set, key, cost)
							ret := time.Now().UnixNano()
							if err != nil {
								t.Error(err)
								return
							}
							if v.Allowed {
								mu.Lock()
								adm = append(adm, admission{key, call, ret, cost, v.Source == lease.Source})
								if v.Source == lease.Source {
									leased++
								}
								mu.Unlock()
							}
							if rng.IntN(3) == 0 {
								time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
							}
						}
					}()
				}
			}
			wg.Wait()
			for _, s := range stores {
				s.Close()
			}
			t.Logf("%d admissions, %d from leases", len(adm), leased)
			if set.At(0).Kind() == algo.SlidingLog && leased > 0 {
				t.Fatalf("a sliding_log set was answered from a lease %d times", leased)
			}
			if set.At(0).Kind() != algo.SlidingLog && leased == 0 {
				t.Fatalf("no decision came from a lease: the test does not test leases")
			}
			for _, k := range keys {
				var ks []admission
				for _, a := range adm {
					if a.key == k {
						ks = append(ks, a)
					}
				}
				for i := range set.Len() {
					checkTransition(t, k, set.At(i), ks, ttl)
				}
			}
		})
	}
}

// checkTransition checks the admissions of one key against transition tr.
func checkTransition(t *testing.T, key string, tr *algo.Transition, as []admission, ttl time.Duration) {
	t.Helper()
	sort.Slice(as, func(i, j int) bool { return as[i].ret < as[j].ret })
	switch tr.Kind() {
	case algo.FixedWindow, algo.SlidingWindow:
		// Every admission's instant lies in [call, ret]. Those whose call
		// and ret fall in one window are known to lie in it; the others
		// (a handful at boundaries) are left out, which can only hide
		// admissions, never invent them.
		win := func(ns int64) int64 { s, _ := tr.Window(ns); return s }
		if tr.Kind() == algo.SlidingWindow {
			win = func(ns int64) int64 { return ns - ns%tr.Span() }
		}
		counts := map[int64]int64{}
		var st algo.State
		dropped := 0
		for _, a := range as {
			if win(a.call) != win(a.ret) {
				dropped++
				continue
			}
			counts[win(a.ret)] += a.cost
			if tr.Kind() == algo.SlidingWindow {
				// Later in its window is laxer, so replaying at ret is a
				// sound check.
				var d algo.Decision
				st, d = tr.Step(st, a.ret, a.cost)
				if !d.Allowed {
					t.Fatalf("key %s: sliding window replay denies an admission of %d at %s", key, a.cost, time.Unix(0, a.ret).Format(time.RFC3339Nano))
				}
			}
		}
		var over []string
		var under []int64
		for w, n := range counts {
			if n > tr.Capacity() {
				over = append(over, fmt.Sprintf("window %d: %d > %d", w, n, tr.Capacity()))
			}
			if key == "hot" {
				under = append(under, tr.Capacity()-n)
			}
		}
		if len(over) > 0 {
			t.Fatalf("key %s over the limit: %v", key, over)
		}
		if len(under) > 0 {
			sort.Slice(under, func(i, j int) bool { return under[i] < under[j] })
			t.Logf("key %s %s: %d windows, units left unadmitted per window: median %d, max %d (%d admissions straddled a boundary)",
				key, tr.Kind(), len(under), under[len(under)/2], under[len(under)-1], dropped)
		}
	case algo.GCRA:
		// A bucket of the same rate, larger by what TTL refills (plus one
		// for rounding), must admit every admission replayed at its ret:
		// later is laxer for a bucket.
		sp := tr.Spec()
		sp.Burst = tr.Capacity() + int64(ttl)/tr.Interval() + 1
		ref, err := algo.New(sp)
		if err != nil {
			t.Fatal(err)
		}
		var st algo.State
		for _, a := range as {
			var d algo.Decision
			st, d = ref.Step(st, a.ret, a.cost)
			if !d.Allowed {
				t.Fatalf("key %s: bucket replay (capacity %d + TTL's refill) denies an admission of %d at %s", key, tr.Capacity(), a.cost, time.Unix(0, a.ret).Format(time.RFC3339Nano))
			}
		}
	}
}
