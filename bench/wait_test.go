package bench

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// tick is the step of the differential's clock: 5^9 ns. x/time/rate turns
// a duration d into tokens as d·r/1e9 in float64, which is exact when d·r
// is a multiple of 5^9 (1e9 is 2^9·5^9); with r a power of two and every
// instant a multiple of tick, each of its computations is exact, so its
// answers are the exact ones and the two libraries must agree to the
// nanosecond.
const tick = 1953125 * time.Nanosecond

// TestReserveMatchesXTimeRate runs random sequences of reservations
// through floodgate (memory, a pinned clock) and x/time/rate's ReserveN at
// the same instants, where both are exact, and compares every delay.
func TestReserveMatchesXTimeRate(t *testing.T) {
	for _, c := range []struct {
		perSecond, burst int64
	}{{8, 1}, {8, 8}, {16, 5}, {1, 3}, {256, 40}} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(c.perSecond)))
			clock := floodgatetest.NewClock(floodgatetest.Start)
			store := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
			lim, err := floodgate.New(store, floodgate.Policy{Name: "diff", Limits: []floodgate.Limit{floodgate.PerSecond(c.perSecond).WithBurst(c.burst)}})
			if err != nil {
				t.Fatal(err)
			}
			ref := rate.NewLimiter(rate.Limit(c.perSecond), int(c.burst))
			ref.SetLimitAt(clock.Now(), rate.Limit(c.perSecond)) // start its clock at the same instant
			for step := range 200 {
				clock.Advance(time.Duration(rng.Int64N(int64(time.Second/tick)/2)) * tick)
				n := rng.Int64N(c.burst) + 1
				r, err := lim.ReserveN(context.Background(), "k", n)
				if err != nil || !r.OK {
					t.Fatalf("%d/s burst %d seed %d step %d: %+v, %v", c.perSecond, c.burst, seed, step, r, err)
				}
				want := ref.ReserveN(clock.Now(), int(n)).DelayFrom(clock.Now())
				if r.Delay != want {
					t.Fatalf("%d/s burst %d seed %d step %d: %d units wait %s, x/time/rate says %s", c.perSecond, c.burst, seed, step, n, r.Delay, want)
				}
			}
			store.Close()
		}
	}
}

// BenchmarkWait is the cost of Reserve and of a Wait that does not sleep
// (the units are there), floodgate's memory engine beside x/time/rate, one
// key, from every CPU (callers=par) and from one goroutine (callers=1).
func BenchmarkWait(b *testing.B) {
	for _, par := range []bool{false, true} {
		callers := "1"
		if par {
			callers = "par"
		}
		b.Run("callers="+callers, func(b *testing.B) { benchWait(b, par) })
	}
}

// run calls op b.N times, from every CPU when par.
func run(b *testing.B, par bool, op func()) {
	b.ReportAllocs()
	if !par {
		for range b.N {
			op()
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op()
		}
	})
}

func benchWait(b *testing.B, par bool) {
	ctx := context.Background()
	const perSecond = 1 << 40 // never waits: the overhead alone
	newFG := func(b *testing.B) *floodgate.PolicyLimiter {
		store := memstore.New(memstore.Options{})
		b.Cleanup(func() { store.Close() })
		lim, err := floodgate.New(store, floodgate.Policy{Name: "wait", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000_000).WithBurst(1 << 20)}})
		if err != nil {
			b.Fatal(err)
		}
		return lim
	}
	newRef := func() *rate.Limiter { return rate.NewLimiter(rate.Limit(perSecond), 1<<20) }
	b.Run("op=reserve/impl=floodgate", func(b *testing.B) {
		lim := newFG(b)
		run(b, par, func() {
			if _, err := lim.ReserveN(ctx, "k", 1); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("op=reserve/impl=x-time-rate", func(b *testing.B) {
		lim := newRef()
		run(b, par, func() { lim.Reserve() })
	})
	b.Run("op=wait/impl=floodgate", func(b *testing.B) {
		lim := newFG(b)
		run(b, par, func() {
			if _, err := floodgate.Wait(ctx, lim, "k"); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("op=wait/impl=x-time-rate", func(b *testing.B) {
		lim := newRef()
		run(b, par, func() {
			if err := lim.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		})
	})
}
