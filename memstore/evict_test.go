package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestFloodKeepsExhaustedKeys is a brute force against a full store: a few
// keys have used up their PerHour(5) (as a login limit would after five
// failed guesses), then a flood of fresh keys, each charged once, churns
// the store many times over. Eviction must drop the fresh keys, which carry
// the least debt, and keep every exhausted key denied, whatever the
// algorithm, and also when the flood runs under another algorithm than the
// exhausted keys (whose state the store keeps in another table).
//
// Eviction compares a sample of evictSamples (8) entries, so an exhausted
// key is evicted only when every sampled entry is exhausted too. With one
// entry in 32 exhausted that happens about once in 32^8 ≈ 10^12 evictions;
// the flood makes fewer than 10^6 here, so the test expects none at all.
func TestFloodKeepsExhaustedKeys(t *testing.T) {
	ctx := context.Background()
	const (
		maxKeys   = 1024
		exhausted = maxKeys / 32
		flood     = 40_000
	)
	type pair struct{ victims, flood floodgate.Algorithm }
	var cases []pair
	for _, alg := range []floodgate.Algorithm{floodgate.GCRA, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog} {
		cases = append(cases, pair{alg, alg})
	}
	cases = append(cases,
		pair{floodgate.GCRA, floodgate.SlidingLog},
		pair{floodgate.SlidingLog, floodgate.FixedWindow},
		pair{floodgate.FixedWindow, floodgate.SlidingWindow},
		pair{floodgate.SlidingWindow, floodgate.GCRA},
	)
	for _, c := range cases {
		name := c.victims.String()
		if c.flood != c.victims {
			name += "/flood=" + c.flood.String()
		}
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewClock(floodgatetest.Start)
			s := newStore(t, memstore.Options{Clock: clock, MaxKeys: maxKeys, Shards: 4, SweepInterval: -1})
			l := floodgate.PerHour(5).WithAlgorithm(c.victims)
			lim := newLimiter(t, s, l)
			flooder, err := floodgate.New(s, floodgate.Policy{Name: "flood", Limits: []floodgate.Limit{floodgate.PerHour(5).WithAlgorithm(c.flood)}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range exhausted {
				k := "victim:" + strconv.Itoa(i)
				for j := range l.Capacity() + 1 {
					res, err := floodgate.Allow(ctx, lim, k)
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed != (j < l.Capacity()) {
						t.Fatalf("request %d of %s: allowed = %v", j+1, k, res.Allowed)
					}
				}
			}
			for i := range flood {
				if i%1000 == 0 {
					clock.Advance(time.Millisecond)
				}
				if _, err := floodgate.Allow(ctx, flooder, "flood:"+strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
			}
			if n := s.Len(); n > maxKeys {
				t.Fatalf("store holds %d entries, bound is %d", n, maxKeys)
			}
			if s.Evictions() < flood-maxKeys {
				t.Fatalf("%d evictions; the flood should have caused at least %d", s.Evictions(), flood-maxKeys)
			}
			freed := 0
			for i := range exhausted {
				res, err := lim.AllowN(ctx, "victim:"+strconv.Itoa(i), 0)
				if err != nil {
					t.Fatal(err)
				}
				if res.Remaining != 0 {
					freed++
				}
			}
			if freed > 0 {
				t.Fatalf("%d of %d exhausted keys were evicted and may pass again", freed, exhausted)
			}
		})
	}
}
