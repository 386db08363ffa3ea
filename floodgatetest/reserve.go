package floodgatetest

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// RaceReservations has workers goroutines per limiter reserve one unit at a
// time, n times each, all at once on a clock that stands still, and checks
// the instants granted: every reservation is taken, and, sorted, the k-th
// unit waits exactly max(0, k−capacity+1) intervals. So racing callers,
// also of several limiters over stores that share their state (instances
// over one Redis), neither over-admit nor leave a gap. lims decide one
// policy whose only limit is a token bucket of the given capacity, whose
// interval is interval in the engine's arithmetic (Redis rounds it up to a
// whole microsecond).
func RaceReservations(t *testing.T, capacity int64, interval time.Duration, workers, n int, lims ...floodgate.Limiter) {
	t.Helper()
	var mu sync.Mutex
	var delays []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, len(lims)*workers)
	for _, l := range lims {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					r, err := l.ReserveN(context.Background(), "racer", 1)
					if err != nil {
						errs <- err
						return
					}
					if !r.OK {
						errs <- errNotOK
						return
					}
					mu.Lock()
					delays = append(delays, r.Delay)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(delays)
	for k, d := range delays {
		want := time.Duration(max(0, int64(k)-capacity+1)) * interval
		if d != want {
			t.Fatalf("unit %d of %d waits %s, want %s", k, len(delays), d, want)
		}
	}
}

type reserveError string

func (e reserveError) Error() string { return string(e) }

const errNotOK = reserveError("a reservation without a deadline was refused")

// RandomReservations drives h's engine with random histories of
// reservations, decisions, cancellations and refunds of earlier admissions
// (many at one instant, so that reservations queue up behind each other
// and are cancelled in any order) on a pinned clock moved in whole
// microseconds, and checks after every operation that the units in use
// conform to every limit: in any window [a, b] between two instants
// granted, the units at those instants are at most Capacity +
// Rate×(b−a)/Period. The reference holds every admission that passed and
// every reservation not cancelled before its instant, less what refunds
// gave back: a refund of n units gives back the newest n units granted,
// and only when no units are granted for an instant after it (a state of
// one instant cannot tell which charge a refund means, nor give back units
// a later reservation was timed behind). Nothing in it depends on how the
// engine keeps its state.
func RandomReservations(t *testing.T, h Harness, histories, steps int) {
	t.Helper()
	policies := []floodgate.Policy{
		{Name: "prop-one", Limits: []floodgate.Limit{floodgate.PerSecond(1).WithBurst(2)}},
		{Name: "prop-three", Limits: []floodgate.Limit{floodgate.PerSecond(1).WithBurst(3)}},
		{Name: "prop-two", Limits: []floodgate.Limit{floodgate.PerSecond(4).WithBurst(3), floodgate.PerMinute(90).WithBurst(5)}},
	}
	for i := range histories {
		p := policies[i%len(policies)]
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		if !randomHistory(t, h, p, rng, steps) {
			t.Fatalf("history %d (policy %s) over-admits", i, p.Name)
		}
	}
}

type grant struct {
	at   int64 // Unix ns on the engine's clock
	cost int64
}

type held struct {
	r *floodgate.Reservation
	g grant
}

func randomHistory(t *testing.T, h Harness, p floodgate.Policy, rng *rand.Rand, steps int) bool {
	t.Helper()
	ctx := context.Background()
	clock := NewClock(Start)
	lim, err := floodgate.New(h.NewStore(t, clock), p)
	if err != nil {
		t.Fatal(err)
	}
	capacity := p.Limits[0].Capacity()
	span := int64(capacity) * int64(p.Limits[0].Interval())
	var used []grant     // admissions and reservations not taken back
	var open []held      // reservations not cancelled
	var admitted []int64 // units of each admission not refunded yet
	var log []string
	for range steps {
		if rng.IntN(2) == 0 {
			clock.Advance(time.Duration(rng.Int64N(span/2/1e3+1)) * time.Microsecond)
		}
		now := clock.UnixNano()
		cost := rng.Int64N(capacity) + 1
		switch op := rng.IntN(12); {
		case op < 2:
			res, err := lim.AllowN(ctx, "k", cost)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprintf("%s allow %d: %v", since(now), cost, res.Allowed))
			if res.Allowed {
				used = append(used, grant{now, cost})
				admitted = append(admitted, cost)
			}
		case op < 6:
			r, err := lim.ReserveN(ctx, "k", cost)
			if err != nil {
				t.Fatal(err)
			}
			g := grant{now + int64(r.Delay), cost}
			log = append(log, fmt.Sprintf("%s reserve %d: %v, for %s", since(now), cost, r.OK, since(g.at)))
			if r.OK {
				used = append(used, g)
				open = append(open, held{r, g})
			}
		case op >= 10:
			if len(admitted) == 0 {
				continue
			}
			k := rng.IntN(len(admitted))
			n := rng.Int64N(admitted[k]) + 1
			if admitted[k] -= n; admitted[k] == 0 {
				admitted = slices.Delete(admitted, k, k+1)
			}
			if err := lim.RefundN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprintf("%s refund %d", since(now), n))
			used = refund(used, now, n)
		default:
			if len(open) == 0 {
				continue
			}
			k := rng.IntN(len(open))
			c := open[k]
			open = slices.Delete(open, k, k+1)
			if err := c.r.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprintf("%s cancel the reservation for %s", since(now), since(c.g.at)))
			if now < c.g.at {
				// Given back before its instant: its units are not used.
				i := slices.Index(used, c.g)
				used = slices.Delete(used, i, i+1)
			}
		}
		for _, l := range p.Limits {
			if why := overAdmits(used, l); why != "" {
				t.Errorf("%s: %s, after:\n\t%s", l, why, strings.Join(log, "\n\t"))
				return false
			}
		}
	}
	return true
}

// refund returns used less the newest n units, or used itself when some
// are granted for an instant after now: what a refund at now gives back.
func refund(used []grant, now, n int64) []grant {
	if slices.ContainsFunc(used, func(g grant) bool { return g.at > now }) {
		return used
	}
	slices.SortStableFunc(used, func(a, b grant) int { return cmp.Compare(a.at, b.at) })
	for n > 0 && len(used) > 0 {
		last := &used[len(used)-1]
		take := min(n, last.cost)
		last.cost -= take
		n -= take
		if last.cost == 0 {
			used = used[:len(used)-1]
		}
	}
	return used
}

// overAdmits returns a window in which used holds more units than l
// admits, or "" when there is none. The bound is exact (integers scaled by
// Rate), not GCRA's rounded interval.
func overAdmits(used []grant, l floodgate.Limit) string {
	sorted := slices.Clone(used)
	slices.SortFunc(sorted, func(a, b grant) int { return cmp.Compare(a.at, b.at) })
	for i := range sorted {
		units := int64(0)
		for j := i; j < len(sorted); j++ {
			units += sorted[j].cost
			w := sorted[j].at - sorted[i].at
			// units ≤ capacity + rate×w/period, scaled by period.
			hi, lo := bits.Mul64(uint64(l.Rate), uint64(w))
			if hi == 0 && lo < 1<<62 && units*int64(l.Period) > l.Capacity()*int64(l.Period)+int64(lo) {
				return fmt.Sprintf("%d units from %s to %s", units, since(sorted[i].at), since(sorted[j].at))
			}
		}
	}
	return ""
}

// since formats the instant ns as its time after Start.
func since(ns int64) string { return "+" + time.Duration(ns-Start.UnixNano()).String() }
