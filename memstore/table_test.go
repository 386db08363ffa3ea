package memstore

import (
	"math/rand/v2"
	"testing"
)

// TestTableMatchesMap drives the table and a Go map with the same random
// operations, including sweeps that delete in the middle of probe runs, and
// checks they always agree.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tb table[int64]
	ref := map[uint64]int64{}
	// A small key space forces collisions and long probe runs.
	key := func() uint64 { return uint64(rng.IntN(512)) + 1 }
	for op := 0; op < 200_000; op++ {
		switch r := rng.IntN(100); {
		case r < 50:
			k, v := key(), rng.Int64()
			tb.put(k, v)
			ref[k] = v
		case r < 80:
			k := key()
			tb.remove(k)
			delete(ref, k)
		case r < 99:
			k := key()
			got, ok := tb.get(k)
			want, wok := ref[k]
			if ok != wok || got != want {
				t.Fatalf("op %d: get(%d) = %d,%v, want %d,%v", op, k, got, ok, want, wok)
			}
		default:
			cut := rng.Int64()
			n := tb.sweep(func(v int64) bool { return v < cut })
			dropped := 0
			for k, v := range ref {
				if v < cut {
					delete(ref, k)
					dropped++
				}
			}
			if n != dropped {
				t.Fatalf("op %d: sweep dropped %d, want %d", op, n, dropped)
			}
		}
		if tb.n != len(ref) {
			t.Fatalf("op %d: n = %d, want %d", op, tb.n, len(ref))
		}
	}
	for k, want := range ref {
		if got, ok := tb.get(k); !ok || got != want {
			t.Fatalf("final get(%d) = %d,%v, want %d", k, got, ok, want)
		}
	}
}

func TestTableShrinksWhenEmptied(t *testing.T) {
	var tb table[int64]
	for k := uint64(1); k <= 10_000; k++ {
		tb.put(k*0x9e3779b97f4a7c15, 1)
	}
	grown := len(tb.slots)
	if grown < 10_000 {
		t.Fatalf("table of 10000 keys has %d slots", grown)
	}
	for k := uint64(1); k <= 10_000; k++ {
		if k%100 != 0 {
			tb.remove(k * 0x9e3779b97f4a7c15)
		}
	}
	tb.sweep(func(int64) bool { return false })
	if len(tb.slots) >= grown/8 {
		t.Fatalf("after dropping 99%% of keys the table still has %d of %d slots", len(tb.slots), grown)
	}
	for k := uint64(100); k <= 10_000; k += 100 {
		if _, ok := tb.get(k * 0x9e3779b97f4a7c15); !ok {
			t.Fatalf("key %d lost by shrinking", k)
		}
	}
	tb.sweep(func(int64) bool { return true })
	if tb.n != 0 || tb.slots != nil {
		t.Fatalf("emptied table keeps n=%d, %d slots", tb.n, len(tb.slots))
	}
}
