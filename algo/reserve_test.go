package algo_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// admission is units used at an instant: a decision that passed at its
// now, or a reservation at the instant it names.
type admission struct{ at, cost int64 }

// conforming reports whether admissions, used in the order of their
// instants, stay within a token bucket of capacity units refilling one unit
// per interval: the reference, written as a credit of time (a token count
// scaled by the interval) rather than as GCRA's arrival time.
func conforming(adm []admission, interval, capacity int64) (bool, string) {
	sorted := slices.Clone(adm)
	slices.SortStableFunc(sorted, func(a, b admission) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	full := capacity * interval
	credit, last := full, int64(0)
	for i, a := range sorted {
		if i > 0 {
			credit = min(full, credit+(a.at-last))
		}
		last = a.at
		need := a.cost * interval
		if credit < need {
			return false, fmt.Sprintf("%d units at %d find %d ns of credit, need %d", a.cost, a.at, credit, need)
		}
		credit -= need
	}
	return true, ""
}

// TestReservationsNeverOverAdmit drives sets of GCRA limits with random
// decisions, reservations (some beyond their deadline), cancellations
// (some after their instant) and refunds (none on a set with a Reserved
// limit, which must show whenever a reservation is due later), and checks after every operation that the
// units in use, at the instants they were granted, conform to every limit;
// and, until the first cancellation, that every wait is the shortest
// possible: one nanosecond earlier would not conform.
func TestReservationsNeverOverAdmit(t *testing.T) {
	specs := [][]algo.Spec{
		{{Kind: algo.GCRA, Rate: 10, Period: time.Second}},
		{{Kind: algo.GCRA, Rate: 1, Period: time.Second, Burst: 2}},
		{{Kind: algo.GCRA, Rate: 1, Period: time.Second, Burst: 3}},
		{{Kind: algo.GCRA, Rate: 3, Period: time.Second, Burst: 7}},
		{{Kind: algo.GCRA, Rate: 7, Period: time.Second}, {Kind: algo.GCRA, Rate: 20, Period: time.Minute, Burst: 5}},
		{{Kind: algo.GCRA, Rate: 1000, Period: time.Second, Burst: 1}, {Kind: algo.GCRA, Rate: 3, Period: time.Millisecond, Burst: 9}},
	}
	for si, sp := range specs {
		ts := make([]algo.Transition, len(sp))
		for i, s := range sp {
			tr, err := algo.New(s)
			if err != nil {
				t.Fatal(err)
			}
			ts[i] = tr
		}
		set, err := algo.NewSet("p", "", ts)
		if err != nil {
			t.Fatal(err)
		}
		for seed := range uint64(100) {
			t.Run(fmt.Sprintf("set%d/seed%d", si, seed), func(t *testing.T) {
				runReservations(t, set, rand.New(rand.NewPCG(seed, uint64(si))))
			})
		}
	}
}

type booked struct {
	adm    admission
	ticket algo.Ticket
	live   bool
}

func runReservations(t *testing.T, set *algo.Set, rng *rand.Rand) {
	n := set.Len()
	states := make([]algo.State, n)
	next := make([]algo.State, n)
	now := int64(1e12)
	var adm []admission
	var res []*booked
	cancelled := false
	span := set.At(0).Span()
	check := func(step int, what string) {
		t.Helper()
		live := slices.Clone(adm)
		for _, b := range res {
			if b.live {
				live = append(live, b.adm)
			}
		}
		for i := range n {
			r := set.At(i)
			if ok, why := conforming(live, r.Interval(), r.Capacity()); !ok {
				t.Fatalf("step %d (%s): limit %d over-admits: %s", step, what, i, why)
			}
		}
	}
	for step := range 300 {
		// Half the operations come at the instant of the one before, so
		// that reservations pile up behind each other.
		if rng.IntN(2) == 0 {
			now += rng.Int64N(span/4 + 1)
		}
		cost := rng.Int64N(set.Capacity()+1) + 0
		switch op := rng.IntN(12); {
		case op < 3: // a decision now: Step on every limit, all or nothing
			ok := true
			for i := range n {
				nx, d := set.At(i).Step(states[i], now, cost)
				next[i], ok = nx, ok && d.Allowed
			}
			if ok && cost > 0 {
				copy(states, next)
				adm = append(adm, admission{now, cost})
			}
			check(step, "decide")
		case op < 8: // a reservation
			maxWait := rng.Int64N(3 * span)
			before := slices.Clone(states)
			v := set.Reserve(states, next, now, cost, maxWait, "m")
			if !v.Allowed {
				if !slices.Equal(next[:n], before) {
					t.Fatalf("step %d: a refused reservation changed the state", step)
				}
				if int64(v.RetryAfter) <= set.MaxWait(maxWait) {
					t.Fatalf("step %d: refused a wait of %s within %s", step, v.RetryAfter, time.Duration(maxWait))
				}
				continue
			}
			at := now + int64(v.RetryAfter)
			tk := algo.Ticket{At: at}
			for i := range n {
				tk.Prev[i], tk.Next[i] = states[i].A, next[i].A
			}
			copy(states, next)
			if cost == 0 {
				continue
			}
			b := &booked{adm: admission{at, cost}, ticket: tk, live: true}
			res = append(res, b)
			check(step, "reserve")
			if !cancelled && v.RetryAfter > 0 {
				b.adm.at--
				for i := range n {
					r := set.At(i)
					live := append(slices.Clone(adm), b.adm)
					for _, o := range res {
						if o.live && o != b {
							live = append(live, o.adm)
						}
					}
					if ok, _ := conforming(live, r.Interval(), r.Capacity()); !ok {
						goto exact
					}
				}
				t.Fatalf("step %d: a wait of %s, and %s less would conform", step, v.RetryAfter, time.Nanosecond)
			exact:
				b.adm.at++
			}
		case op >= 10: // a refund, given back as the newest units
			reserved := false
			for i := range n {
				reserved = reserved || set.At(i).Reserved(states[i], now)
			}
			future := false
			var units []*admission
			for i := range adm {
				units = append(units, &adm[i])
			}
			for _, b := range res {
				if b.live {
					units = append(units, &b.adm)
					future = future || b.adm.at > now
				}
			}
			if future && !reserved {
				t.Fatalf("step %d: a reservation is due after now and no limit is Reserved", step)
			}
			if reserved || cost == 0 {
				continue
			}
			for i := range n {
				states[i] = set.At(i).Refund(states[i], now, cost)
			}
			cancelled = true
			slices.SortStableFunc(units, func(a, b *admission) int { return int(min(max(a.at-b.at, -1), 1)) })
			for left, i := cost, len(units)-1; left > 0 && i >= 0; i-- {
				take := min(left, units[i].cost)
				units[i].cost -= take
				left -= take
			}
			check(step, "refund")
		default: // cancel a reservation, maybe after its instant
			if len(res) == 0 {
				continue
			}
			var live []*booked
			for _, b := range res {
				if b.live {
					live = append(live, b)
				}
			}
			if len(live) == 0 {
				continue
			}
			b := live[rng.IntN(len(live))]
			cancelled = true
			for i := range n {
				states[i] = set.At(i).Unreserve(states[i], now, b.ticket.At, b.ticket.Prev[i], b.ticket.Next[i], b.adm.cost)
			}
			if now < b.ticket.At {
				b.live = false // its units will not be used
			} else {
				adm = append(adm, b.adm) // they were due: they count
				b.live = false
			}
			check(step, "cancel")
			// What the engine holds must keep every live reservation safe
			// against what comes next: fill the bucket now, as greedily as
			// possible, and check again.
			for range 3 {
				v := set.Reserve(states, next, now, 1, int64(algo.Never), "m")
				if !v.Allowed {
					break
				}
				tk := algo.Ticket{At: now + int64(v.RetryAfter)}
				for i := range n {
					tk.Prev[i], tk.Next[i] = states[i].A, next[i].A
				}
				copy(states, next)
				res = append(res, &booked{adm: admission{tk.At, 1}, live: true, ticket: tk})
				check(step, "reserve after cancel")
			}
		}
	}
}

// TestReserveClampsTheWait: a reservation never books further ahead than a
// limit's span plus MaxReserveAhead, whatever it is allowed to wait.
func TestReserveClampsTheWait(t *testing.T) {
	tr, err := algo.New(algo.Spec{Kind: algo.GCRA, Rate: 1, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := algo.NewSet("p", "", []algo.Transition{tr})
	if got, want := set.MaxWait(int64(algo.Never)), int64(time.Hour+algo.MaxReserveAhead); got != want {
		t.Fatalf("MaxWait = %d, want %d", got, want)
	}
	states, next := []algo.State{{}}, []algo.State{{}}
	now := int64(1e12)
	booked := 0
	for range 20 {
		v := set.Reserve(states, next, now, 1, int64(algo.Never), "m")
		if !v.Allowed {
			break
		}
		copy(states, next)
		booked++
	}
	// One now, then one an hour for the span and the 12 hours ahead.
	if booked != 14 {
		t.Fatalf("booked %d, want 14", booked)
	}
	if set.MaxWait(-5) != 0 {
		t.Errorf("a negative wait is not 0")
	}
}

// TestCancelOfAnEarlierReservation: a cancel gives back nothing while a
// later reservation is outstanding. Burst 2 at 1/s, everything at one
// instant: 1 unit now, r1 = 2 units (1s), r2 = 1 unit (2s); cancelling r1
// and then r2 around r3 = 2 units (3s) must not let a last unit in at 3s
// too, beside r3's two (x/time/rate gives it 4s; keeping everything, 5s).
func TestCancelOfAnEarlierReservation(t *testing.T) {
	tr, err := algo.New(algo.Spec{Kind: algo.GCRA, Rate: 1, Period: time.Second, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := algo.NewSet("p", "", []algo.Transition{tr})
	states, next := []algo.State{{}}, []algo.State{{}}
	now := int64(1e12)
	var adm []admission
	reserve := func(cost int64) algo.Ticket {
		t.Helper()
		v := set.Reserve(states, next, now, cost, int64(algo.Never), "m")
		if !v.Allowed {
			t.Fatalf("reserving %d refused", cost)
		}
		tk := algo.Ticket{At: now + int64(v.RetryAfter)}
		tk.Prev[0], tk.Next[0] = states[0].A, next[0].A
		copy(states, next)
		adm = append(adm, admission{tk.At, cost})
		return tk
	}
	cancel := func(tk algo.Ticket, cost int64) {
		states[0] = tr.Unreserve(states[0], now, tk.At, tk.Prev[0], tk.Next[0], cost)
		adm = slices.DeleteFunc(adm, func(a admission) bool { return a == admission{tk.At, cost} })
	}
	reserve(1)
	r1 := reserve(2)
	r2 := reserve(1)
	cancel(r1, 2)
	r3 := reserve(2)
	cancel(r2, 1)
	r4 := reserve(1)
	if ok, why := conforming(adm, tr.Interval(), tr.Capacity()); !ok {
		t.Fatalf("r3 at +%s, r4 at +%s over-admit: %s", time.Duration(r3.At-now), time.Duration(r4.At-now), why)
	}
	// Cancelled newest first, reservations come back in full: the state
	// is as if r3 had never been made.
	cancel(r4, 1)
	cancel(r3, 2)
	if states[0].A != r3.Prev[0] {
		t.Fatalf("after cancelling r4 and r3: TAT +%s, want +%s", time.Duration(states[0].A-now), time.Duration(r3.Prev[0]-now))
	}
}
