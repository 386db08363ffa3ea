package adaptive_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/adaptive"
)

type fakeClock struct{ now int64 }

func (c *fakeClock) UnixNano() int64     { return c.now }
func (c *fakeClock) add(d time.Duration) { c.now += int64(d) }
func ok(rtt time.Duration, in int) concurrency.Sample {
	return concurrency.Sample{RTT: rtt, InFlight: in, Outcome: concurrency.Success}
}

func newGradient(t *testing.T, clock clock.Clock) *adaptive.Gradient {
	t.Helper()
	g, err := adaptive.NewGradient(adaptive.GradientOptions{Initial: 10, Clock: clock, ProbeSamples: 5, MinSamples: 5, Window: time.Second, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// window feeds one window of n samples of latency rtt at in flight.
func window(g *adaptive.Gradient, c *fakeClock, rtt time.Duration, in, n int) {
	for range n {
		g.Observe(ok(rtt, in))
	}
	c.add(time.Second)
	g.Observe(ok(rtt, in))
}

func TestGradientProbesThenGrows(t *testing.T) {
	c := &fakeClock{now: 1}
	g := newGradient(t, c)
	if g.Limit() != adaptive.DefaultMin {
		t.Fatalf("limit while probing = %d, want Min", g.Limit())
	}
	for range 5 {
		g.Observe(ok(10*time.Millisecond, 2))
	}
	if g.Baseline() != 10*time.Millisecond || g.Limit() != 10 {
		t.Fatalf("after the probe: baseline %s limit %d", g.Baseline(), g.Limit())
	}
	prev := g.Limit()
	for range 5 {
		window(g, c, 10*time.Millisecond, g.Limit(), 10)
	}
	if g.Limit() <= prev {
		t.Fatalf("limit %d did not grow at the baseline latency from %d", g.Limit(), prev)
	}
}

func TestGradientShedsOnLatency(t *testing.T) {
	c := &fakeClock{now: 1}
	g := newGradient(t, c)
	for range 5 {
		g.Observe(ok(10*time.Millisecond, 1))
	}
	window(g, c, 40*time.Millisecond, 10, 10)
	// gradient 1.1×10/40 is below 0.5: the limit halves, plus √10.
	if got := g.Limit(); got != 8 {
		t.Fatalf("limit = %d, want 8 (10×0.5+√10)", got)
	}
}

func TestGradientAppLimitedDoesNotGrow(t *testing.T) {
	c := &fakeClock{now: 1}
	g := newGradient(t, c)
	for range 5 {
		g.Observe(ok(10*time.Millisecond, 1))
	}
	for range 20 {
		window(g, c, 10*time.Millisecond, 2, 10)
	}
	if g.Limit() != 10 {
		t.Fatalf("limit = %d grew without use", g.Limit())
	}
}

// TestGradientFindsCapacity runs the Gradient against a model of a server
// that serves n at a time and queues the rest, under more demand than it
// can serve: the limit must settle above n (the server stays busy) and
// well below 2n (little queueing).
func TestGradientFindsCapacity(t *testing.T) {
	const n, service = 16, 20 * time.Millisecond
	c := &fakeClock{now: 1}
	g, err := adaptive.NewGradient(adaptive.GradientOptions{Clock: c, ProbeInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var seen []int
	for step := range 3000 {
		l := g.Limit()
		rtt := service
		if l > n {
			rtt = service * time.Duration(l) / n
		}
		// One sample per holder per round trip, spread over the round.
		for range l {
			c.add(rtt / time.Duration(l))
			g.Observe(ok(rtt, l))
		}
		if step > 1000 {
			seen = append(seen, g.Limit())
		}
	}
	var sum int
	for _, l := range seen {
		sum += l
	}
	if avg := float64(sum) / float64(len(seen)); avg < n || avg > 1.6*n {
		t.Fatalf("average limit %.1f, want within [%d, %.0f]", avg, n, 1.6*n)
	}
}

func TestAIMD(t *testing.T) {
	c := &fakeClock{now: 1}
	a, err := adaptive.NewAIMD(adaptive.AIMDOptions{Initial: 10, Timeout: 50 * time.Millisecond, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		a.Observe(ok(time.Millisecond, 10))
	}
	if a.Limit() != 11 {
		t.Fatalf("after a round of successes: %d, want 11", a.Limit())
	}
	for range 100 {
		a.Observe(ok(time.Millisecond, 1)) // barely used: no growth
	}
	if a.Limit() != 11 {
		t.Fatalf("grew without use: %d", a.Limit())
	}
	a.Observe(concurrency.Sample{RTT: time.Millisecond, InFlight: 11, Outcome: concurrency.Dropped})
	a.Observe(ok(60*time.Millisecond, 11)) // slow, but within the same overload
	if a.Limit() != 9 {
		t.Fatalf("after one drop: %d, want 9", a.Limit())
	}
	c.add(time.Second)
	a.Observe(ok(60*time.Millisecond, 9))
	if a.Limit() != 8 {
		t.Fatalf("after a slow success: %d, want 8", a.Limit())
	}
	for range 100 {
		c.add(time.Second)
		a.Observe(concurrency.Sample{RTT: time.Millisecond, Outcome: concurrency.Dropped})
	}
	if a.Limit() != adaptive.DefaultMin {
		t.Fatalf("floor: %d", a.Limit())
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, o := range map[string]adaptive.GradientOptions{
		"min above max":  {Min: 5, Max: 4, Initial: 5},
		"tolerance":      {Tolerance: 0.5},
		"smoothing":      {Smoothing: 2},
		"negative probe": {ProbeInterval: -1},
	} {
		if _, err := adaptive.NewGradient(o); !errors.Is(err, adaptive.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, o := range map[string]adaptive.AIMDOptions{
		"backoff": {Backoff: 1},
		"timeout": {Timeout: -1},
		"initial": {Initial: 2000},
	} {
		if _, err := adaptive.NewAIMD(o); !errors.Is(err, adaptive.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestGradientFallsOnDrops(t *testing.T) {
	c := &fakeClock{now: 1}
	g := newGradient(t, c)
	for range 5 {
		g.Observe(ok(10*time.Millisecond, 1))
	}
	for range 10 {
		g.Observe(concurrency.Sample{RTT: 10 * time.Millisecond, InFlight: 10, Outcome: concurrency.Dropped})
	}
	c.add(time.Second)
	g.Observe(ok(10*time.Millisecond, 10))
	if got := g.Limit(); got != 9 {
		t.Fatalf("limit after a window of drops at the baseline latency = %d, want 9", got)
	}
}

// server models a resource that serves n at a time, service each, and
// queues the rest: work admitted at limit l takes service × l/n when l > n.
// run feeds ctl one sample per holder per round trip, spread over the
// round, for d of simulated time, and returns the limit's average over
// that time (weighted by time).
func run(ctl concurrency.Controller, c *fakeClock, n int, service, d time.Duration) float64 {
	var sum float64
	end := c.now + int64(d)
	for c.now < end {
		l := ctl.Limit()
		rtt := service
		if l > n {
			rtt = service * time.Duration(l) / time.Duration(n)
		}
		for range l {
			step := rtt / time.Duration(l)
			c.add(step)
			sum += float64(l) * float64(step)
			ctl.Observe(ok(rtt, l))
		}
	}
	return sum / float64(d)
}

// After the resource turns twice as slow (and later twice as fast), each
// controller keeps it busy (an average limit of at least n) within a few
// seconds, long before a Gradient's next periodic probe (30 s), and an AIMD
// whose Timeout the new latency exceeds does not stay at Min.
func TestStepChangesRecover(t *testing.T) {
	const n, service = 16, 20 * time.Millisecond
	for _, tt := range []struct {
		name string
		ctl  func(c *fakeClock) (concurrency.Controller, error)
	}{
		{"gradient", func(c *fakeClock) (concurrency.Controller, error) {
			return adaptive.NewGradient(adaptive.GradientOptions{Clock: c})
		}},
		{"aimd", func(c *fakeClock) (concurrency.Controller, error) {
			return adaptive.NewAIMD(adaptive.AIMDOptions{Clock: c, Timeout: 3 * service / 2})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeClock{now: 1}
			ctl, err := tt.ctl(c)
			if err != nil {
				t.Fatal(err)
			}
			if avg := run(ctl, c, n, service, 10*time.Second); avg < n {
				t.Fatalf("steady: average limit %.1f, want at least %d", avg, n)
			}
			for _, s := range []struct {
				name    string
				service time.Duration
			}{{"2x slower", 2 * service}, {"2x faster", service}} {
				run(ctl, c, n, s.service, 3*time.Second) // the change is learnt
				if avg := run(ctl, c, n, s.service, 7*time.Second); avg < n || avg > 3*n {
					t.Errorf("%s: average limit %.1f from 3 s to 10 s after the change, want within [%d, %d]", s.name, avg, n, 3*n)
				}
			}
		})
	}
}

// At a steady overload of a resource whose speed does not change, the
// Gradient settles above its baseline (by the √limit headroom) and never
// probes before ProbeInterval: a probe holds the limit at Min, and one a
// second cost the benchmark a tenth of its goodput.
func TestGradientSteadyOverloadDoesNotProbe(t *testing.T) {
	const n, service = 16, 20 * time.Millisecond
	c := &fakeClock{now: 1}
	g, err := adaptive.NewGradient(adaptive.GradientOptions{Clock: c, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run(g, c, n, service, 3*time.Second) // the first probe and the climb
	end := c.now + int64(20*time.Second)
	for c.now < end {
		l := g.Limit()
		if l == adaptive.DefaultMin {
			t.Fatalf("probing again at %s of a steady overload", time.Duration(c.now))
		}
		rtt := service
		if l > n {
			rtt = service * time.Duration(l) / n
		}
		for range l {
			c.add(rtt / time.Duration(l))
			g.Observe(ok(rtt, l))
		}
	}
}
