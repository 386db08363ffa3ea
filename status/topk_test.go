package status

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// shardTotals returns the weight each shard's window holds now, the N of
// the error bound.
func (w *Window) shardTotals() [Shards]uint64 {
	var out [Shards]uint64
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		for b := range s.ring {
			out[i] += s.ring[b].total
		}
		s.mu.Unlock()
	}
	return out
}

func shardOf(key string) int { return int(maphash.String(seed, key) % Shards) }

// TestWindowZipf checks the documented bound against exact counts on
// Zipf-distributed streams, across bucket rotations: every reported key's
// true weight lies in [Count-Error, Count], Error is at most N/PerShard of
// its shard, and every key heavier than that bound is reported.
func TestWindowZipf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		s        float64
		keys     uint64
		perShard int
		buckets  int
	}{
		{"skewed", 1.5, 100000, 8, 4},
		{"mild", 1.1, 1000000, 8, 7},
		{"few counters", 1.2, 50000, 2, 3},
		{"one bucket pair", 2.0, 10000, 16, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			z := rand.NewZipf(rng, tc.s, 1, tc.keys-1)
			w := NewWindow(tc.perShard, tc.buckets)
			// exact[b] is the exact weight per key added in bucket b of
			// the ring; the window holds the last tc.buckets of them.
			var ring []map[string]uint64
			for round := range 3 * tc.buckets {
				if round > 0 {
					w.Rotate()
				}
				exact := map[string]uint64{}
				ring = append(ring, exact)
				for range 20000 {
					key := "user:" + strconv.FormatUint(z.Uint64(), 10)
					weight := 1 + rng.Uint64N(3)
					w.Add(key, weight, 0)
					exact[key] += weight
				}
				inWindow := map[string]uint64{}
				for _, m := range ring[max(0, len(ring)-tc.buckets):] {
					for k, v := range m {
						inWindow[k] += v
					}
				}
				check(t, w, tc.perShard, inWindow)
			}
		})
	}
}

func check(t *testing.T, w *Window, perShard int, exact map[string]uint64) {
	t.Helper()
	totals := w.shardTotals()
	var sum uint64
	for _, v := range exact {
		sum += v
	}
	var held uint64
	for _, n := range totals {
		held += n
	}
	if held != sum {
		t.Fatalf("window holds weight %d; the stream put %d in it", held, sum)
	}
	top := w.Top(0)
	if len(top) > Shards*perShard*w.buckets {
		t.Fatalf("%d keys reported; the memory bound is %d", len(top), Shards*perShard*w.buckets)
	}
	reported := map[string]bool{}
	for _, c := range top {
		reported[c.Key] = true
		bound := totals[shardOf(c.Key)] / uint64(perShard)
		truth := exact[c.Key]
		if truth > c.Count || c.Count-c.Error > truth {
			t.Fatalf("%s: true weight %d outside [%d, %d]", c.Key, truth, c.Count-c.Error, c.Count)
		}
		if c.Error > bound {
			t.Fatalf("%s: error %d above the bound N/k = %d", c.Key, c.Error, bound)
		}
	}
	for k, v := range exact {
		if bound := totals[shardOf(k)] / uint64(perShard); v > bound && !reported[k] {
			t.Fatalf("%s: weight %d is above the bound %d but not reported", k, v, bound)
		}
	}
}

// TestWindowBoundedMemory: a million distinct keys leave the window with
// at most its fixed number of monitored keys.
func TestWindowBoundedMemory(t *testing.T) {
	w := NewWindow(4, 3)
	for i := range 1000000 {
		w.Add("ip:"+strconv.Itoa(i), 1, 0)
	}
	if n := len(w.Top(0)); n > Shards*4*3 {
		t.Fatalf("%d keys monitored; the bound is %d", n, Shards*4*3)
	}
}

// TestRecorderAllocs: recording a decision allocates nothing.
func TestRecorderAllocs(t *testing.T) {
	ctx := context.Background()
	lim := New(Options{}).Limiter(benchLimiter(t))
	for _, key := range []string{"user:42", "user:43"} {
		floodgate.Allow(ctx, lim, key)
		if n := testing.AllocsPerRun(1000, func() { floodgate.Allow(ctx, lim, key) }); n != 0 {
			t.Errorf("%v allocations per recorded decision; want 0", n)
		}
	}
}

func benchLimiter(tb testing.TB) floodgate.Limiter {
	tb.Helper()
	s := memstore.New(memstore.Options{})
	tb.Cleanup(func() { s.Close() })
	lim, err := floodgate.New(s, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1e9).WithBurst(1 << 40)}})
	if err != nil {
		tb.Fatal(err)
	}
	return lim
}

// TestWindowLongKeys: a key above floodgate.MaxKeyLen is kept under the
// engine's digest of it, not as the long string.
func TestWindowLongKeys(t *testing.T) {
	w := NewWindow(2, 2)
	long := "token:" + strings.Repeat("x", 300)
	w.Add(long, 3, 0)
	top := w.Top(0)
	if len(top) != 1 || top[0].Key != floodgate.NormalizeKey(long) || top[0].Count != 3 {
		t.Fatalf("top %+v", top)
	}
}
