package hybrid

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/memstore"
)

func TestScaleLimit(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		berlin = time.FixedZone("CET", 3600)
	}
	for _, tc := range []struct {
		name string
		in   floodgate.Limit
		f    float64
		want floodgate.Limit
	}{
		{"whole", floodgate.PerSecond(10).WithBurst(20), 1, floodgate.PerSecond(10).WithBurst(20)},
		{"half", floodgate.PerSecond(10), 0.5, floodgate.PerSecond(5)},
		{"rounds up", floodgate.PerSecond(10), 0.34, floodgate.PerSecond(4)},
		{"at least one", floodgate.PerMinute(3), 0.01, floodgate.PerMinute(1)},
		{"burst scaled", floodgate.PerSecond(10).WithBurst(30), 0.5, floodgate.PerSecond(5).WithBurst(15)},
		{"burst at least one", floodgate.PerHour(1000).WithBurst(2), 0.1, floodgate.PerHour(100).WithBurst(1)},
		{"token bucket", floodgate.PerSecond(8).WithBurst(4).WithAlgorithm(floodgate.TokenBucket), 0.25,
			floodgate.PerSecond(2).WithBurst(1).WithAlgorithm(floodgate.TokenBucket)},
		{"window", floodgate.PerMinute(100).WithAlgorithm(floodgate.SlidingWindow), 0.2,
			floodgate.PerMinute(20).WithAlgorithm(floodgate.SlidingWindow)},
		{"window with burst = rate", floodgate.PerMinute(100).WithBurst(100).WithAlgorithm(floodgate.FixedWindow), 0.2,
			floodgate.PerMinute(20).WithAlgorithm(floodgate.FixedWindow)},
		{"calendar window", floodgate.PerDay(1000).AlignedTo(berlin), 0.5, floodgate.PerDay(500).AlignedTo(berlin)},
		{"sliding log", floodgate.PerSecond(1000).WithAlgorithm(floodgate.SlidingLog), 0.1,
			floodgate.PerSecond(100).WithAlgorithm(floodgate.SlidingLog)},
	} {
		if got := scaleSpec(tc.in.Spec(), tc.f); got != tc.want.Spec() {
			t.Errorf("%s: scaleSpec(%s, %g) = %+v, want %+v", tc.name, tc.in, tc.f, got, tc.want.Spec())
		}
		if _, err := algo.New(scaleSpec(tc.in.Spec(), tc.f)); err != nil {
			t.Errorf("%s: the share is invalid: %v", tc.name, err)
		}
	}
}

func TestScaleCountHuge(t *testing.T) {
	const n = 1<<62 + 1 // beyond a float64's exact integers
	if got := scaleCount(n, 0.5); got < n/2 || got > n/2+1<<10 {
		t.Errorf("scaleCount(2^62+1, 0.5) = %d", got)
	}
	if got := scaleCount(n, 0.9999999999999999); got > n {
		t.Errorf("scaleCount(2^62+1, ~1) = %d, above n", got)
	}
}

// TestSetCacheForgetsCollectedSets: a daemon that reloads its config for
// weeks builds new limit sets each time; the local shares of the old ones
// must go once nothing uses them, or the cache grows with every reload.
func TestSetCacheForgetsCollectedSets(t *testing.T) {
	local, global := memstore.New(memstore.Options{SweepInterval: -1}), memstore.New(memstore.Options{SweepInterval: -1})
	defer local.Close()
	defer global.Close()
	s, err := New(local, global, Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := floodgate.New(s, floodgate.Policy{Name: "kept", Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	floodgate.Allow(ctx, keep, "k")
	const reloads = 200
	if n := reloadAndCount(t, s, reloads); n != 2*reloads+1 {
		t.Fatalf("%d shares cached while %d policies are alive", n, 2*reloads+1)
	}
	// The reloaded policies are gone now.
	// Cleanups run after a collection, on their own goroutine: collect
	// until they have run, or give up after many rounds.
	for range 1000 {
		runtime.GC()
		if s.sets.cached() <= 1 {
			break
		}
		runtime.Gosched()
	}
	if n := s.sets.cached(); n != 1 {
		t.Fatalf("%d shares cached once only one policy is alive, want 1", n)
	}
	if res, err := floodgate.Allow(ctx, keep, "k"); err != nil || !res.Allowed || res.Source != SourceGlobal || s.sets.cached() != 1 {
		t.Fatalf("the live policy: %+v, %v, %d shares cached; want it decided with its share kept", res, err, s.sets.cached())
	}
	runtime.KeepAlive(keep)
}

// reloadAndCount builds and uses the policies of n reloads, each a policy
// of a new name and one of a reused name, and returns how many shares the
// cache holds while they are alive.
//
//go:noinline
func reloadAndCount(t *testing.T, s *Store, n int) int {
	ctx := context.Background()
	var lims []*floodgate.PolicyLimiter
	for i := range n {
		for _, name := range []string{fmt.Sprintf("p%d", i), "reused"} {
			lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(int64(10 + i))}})
			if err != nil {
				t.Fatal(err)
			}
			floodgate.Allow(ctx, lim, "k")
			lims = append(lims, lim)
		}
	}
	n = s.sets.cached()
	runtime.KeepAlive(lims)
	return n
}
