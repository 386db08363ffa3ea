package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

func benchLimiter(b *testing.B, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	b.Helper()
	s := memstore.New(memstore.Options{})
	b.Cleanup(func() { s.Close() })
	lim, err := floodgate.New(s, floodgate.Policy{Name: "bench", Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// BenchmarkAllow measures one decision on an existing key: one hot key
// shared by every goroutine, and 64k keys spread over them.
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		keys int
	}{{"keys=1", 1}, {"keys=64k", 1 << 16}} {
		b.Run(bc.name, func(b *testing.B) {
			lim := benchLimiter(b, floodgate.PerSecond(1_000_000))
			keys := benchKeys(bc.keys)
			for _, k := range keys {
				floodgate.Allow(ctx, lim, k)
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(7919) * 40503
				for pb.Next() {
					floodgate.Allow(ctx, lim, keys[i&uint64(bc.keys-1)])
					i++
				}
			})
		})
	}
}

// BenchmarkAllowMulti measures a policy of two limits (10/s and 1000/h).
func BenchmarkAllowMulti(b *testing.B) {
	ctx := context.Background()
	lim := benchLimiter(b, floodgate.PerSecond(1_000_000), floodgate.PerHour(1_000_000_000))
	keys := benchKeys(1 << 16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			floodgate.Allow(ctx, lim, keys[i&(1<<16-1)])
			i++
		}
	})
}

// BenchmarkMemoryPerKey reports the heap held per live key with a million
// keys, as the metric B/key.
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	const n = 1_000_000
	keys := benchKeys(n)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := memstore.New(memstore.Options{MaxKeys: -1, SweepInterval: -1})
		lim, err := floodgate.New(s, floodgate.Policy{Name: "mem", Limits: []floodgate.Limit{floodgate.PerMinute(10)}})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			floodgate.Allow(ctx, lim, k)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := s.Len(); got != n {
			b.Fatalf("Len = %d, want %d", got, n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
		s.Close()
		runtime.KeepAlive(lim)
	}
}
