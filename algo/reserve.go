package algo

import "time"

// Reservations. A reservation of cost units at now is an admission at a
// later instant, at = now + wait: the state becomes exactly what it would be
// had the request arrived at at and passed, and the caller uses the units
// from at on. Only GCRA can hold such a charge, since its state is an
// instant; a window's state counts what passed in it, and a charge into a
// window that has not begun has nowhere to go. Engines reserve on a Set only
// when Reservable reports true; a composition's Reserve decides the rest now.
//
// Everything is integer nanoseconds (microseconds in Redis), like Step: the
// wait is the exact instant the charge fits, and a reservation that does not
// fit in maxWait charges nothing.

// MaxReserveAhead is how far beyond its span a reservation may put a limit
// in debt: the longest wait a reservation can get on a limit is its Span
// plus this. The bound keeps every stored instant within what engines accept
// as state they wrote (Redis's check allows two spans and a day).
const MaxReserveAhead = 12 * time.Hour

// A Ticket is what an engine needs to take a reservation back: the engine's
// instant at which the units may be used, and every transition's state
// right after the charge. Compositions (failover, hybrid) say in Path which
// of their stores took it and keep the ticket of a second store in Inner.
type Ticket struct {
	// At is the instant (Unix ns, the engine's clock) from which the units
	// may be used.
	At int64
	// Next holds, per transition, the state the charge left (GCRA's TAT),
	// and Prev the state it found.
	Next, Prev [MaxTransitions]int64
	// Path is a composition's note of which store took the reservation.
	Path uint8
	// Inner is a composition's ticket of a second store (hybrid: the local
	// share's), or nil.
	Inner *Ticket
}

// Reservable reports whether every transition of s can hold a charge for a
// later instant (GCRA).
func (s *Set) Reservable() bool {
	for i := range s.ts {
		if s.ts[i].kind != GCRA {
			return false
		}
	}
	return true
}

// MaxWait clamps maxWait (ns) to the longest wait s can hold: its shortest
// span plus MaxReserveAhead. A negative maxWait is 0.
func (s *Set) MaxWait(maxWait int64) int64 {
	bound := int64(MaxReserveAhead)
	for i := range s.ts {
		if i == 0 || s.ts[i].span+int64(MaxReserveAhead) < bound {
			bound = s.ts[i].span + int64(MaxReserveAhead)
		}
	}
	return min(max(maxWait, 0), bound)
}

// Wait returns how long after now cost units fit under r, a GCRA
// transition in state s: 0 when they fit now, Never when they never can.
func (r *Transition) Wait(s State, now, cost int64) int64 {
	if r.kind != GCRA || !r.valid() || cost < 0 || cost > r.capacity {
		return int64(Never)
	}
	return max(max(s.A, now)+cost*r.interval-now-r.span, 0)
}

// ReserveAt charges cost units to r in state s as an admission at the
// instant at (at ≥ now, at ≥ now+Wait): it returns the next state and the
// decision as seen at now, whose RetryAfter is the wait at − now, Remaining
// what is left at at after the charge, ResetAfter the time from now until
// full.
func (r *Transition) ReserveAt(s State, now, at, cost int64) (State, Decision) {
	next := max(s.A, at) + cost*r.interval
	return State{A: next}, Decision{
		Allowed:    true,
		Remaining:  r.gcraRemaining(next, at),
		ResetAfter: dur(next - now),
		RetryAfter: dur(at - now),
	}
}

// Unreserve takes back a reservation of cost units whose charge moved r's
// state from prev to next and whose units were due at at, from state s at
// now. It gives the units back only when r's state is still next, the
// state the charge left, and then entirely: the state goes back to prev,
// as if the reservation had not been made. In every other case it gives
// back nothing:
//
//   - at or after at the units were due;
//   - a state below next has been refunded or reset since;
//   - a state above next carries a later charge, which was placed behind
//     these units and relies on them.
//
// Why this never over-admits. Call the live history the charges that moved
// the state, in the order they were made, leaving out those given back;
// a charge that was cancelled with nothing back stays in it (its units are
// not used, which only lowers the load). Invariant: the state is the next
// of the newest charge of the live history, and each charge of it was
// decided on the state its predecessor left (or on one that had expired,
// which is the zero state), so the live history is an ordinary GCRA
// history and conforms. Every charge moves the state strictly up (next >
// prev), so the nexts along the live history strictly increase and only
// its newest charge has next equal to the state: a cancel that finds s ==
// next removes the newest charge and restores the state its predecessor
// left, keeping the invariant; a cancel that finds anything else changes
// nothing. A reservation made at any point is decided on that state, as
// the next charge of a conforming history, and so conforms too.
//
// A rule that gives back part of the units while a later charge is
// outstanding must know how many units the later charges hold; s − next
// says so only until some refund has moved the state down, after which it
// undercounts them and the next partial refund over-admits (x/time/rate
// keeps the instant of its last reservation apart for this). One instant
// of state cannot, so a cancel that is not the newest gives nothing back;
// cancelling reservations newest first gives back all of them.
func (r *Transition) Unreserve(s State, now, at, prev, next, cost int64) State {
	if now >= at || r.kind != GCRA || !r.valid() || cost <= 0 || s.A != next {
		return s
	}
	if prev <= now {
		return State{}
	}
	return State{A: prev}
}

// Reserved reports whether s, r's state at now, carries a charge for an
// instant after now: a reservation not yet due. Only GCRA holds such a
// charge, and then its TAT lies more than its span ahead of now. Engines
// refund no transition of a Set while any of them is Reserved (Refund
// checks its own state too).
//
// Why refunds then never over-admit. Take one GCRA transition (interval T,
// span τ) and the units in use U: every charge not given back, at its
// instant (an admission's now, a reservation's at). Let V(U) be the
// largest, over the charges c of U, of c's instant plus T times the units
// of U at or after it: the TAT that U's charges leave when applied in the
// order of their instants. Invariant: U conforms and max(s, now) ≥ V(U),
// where s is the state.
//
//   - A charge of n units at a ≥ now passes only when max(s, a) + nT ≤
//     a + τ (Step at a = now; ReserveAt at a = now + wait, for every
//     transition of the set, since the wait is the longest). A window
//     [x, y] holding a and starting at a charge of U at or before a then
//     holds at most (V(U) − x)/T + n ≤ (max(s, a) + nT − x)/T ≤
//     (a + τ − x)/T units, and one starting at a at most
//     (max(s, a) − a)/T + n ≤ τ/T: within the capacity plus (y − x)/T.
//     The next state, max(s, a) + nT, bounds every term of V of the new U.
//   - Unreserve gives a reservation R back only while s is still what R
//     left and R is not yet due: every charge made after R was given back
//     (a charge moves the state strictly up), refunds since R gave nothing
//     (R was due later), so U without R is a subset of what was in use
//     when R was made, and R's prev bounded V of that.
//   - A refund of n units when no charge of U is dated after now takes the
//     newest n units out of U. Every charge left keeps all n after it, so
//     its term falls by nT: V falls by nT, and s − nT (the zero state when
//     that is not after now) keeps the invariant. Whichever charge the
//     caller meant, the state is the same, so this is what it gives back.
//   - A refund while some charge at a > now is in U may give back nothing:
//     V(U) is then at least a + T × (units at or after a), which can be
//     a + τ, the state the reservation left.
//
// It remains to see that a charge dated after now shows. A reservation of
// n units that waits is driven by a transition d whose own wait is the
// longest, so at = s_d + nT_d − τ_d ≤ s_d and its state becomes exactly
// at + τ_d. While at > now nothing lowers d below that: no admission
// passes (d refuses it), refunds give nothing back (by this rule), a
// cancel of a later reservation restores the state before it, which was
// at least at + τ_d, and a cancel of this one removes it from U. So d is
// Reserved until at; the other transitions of the set need not be, which
// is why an engine checks them all. Conversely no admission leaves a state
// Reserved, so without reservations every refund gives its units back (a
// clock that stepped back can make a state look Reserved, and then a
// refund gives nothing, which is safe).
func (r *Transition) Reserved(s State, now int64) bool {
	return r.kind == GCRA && r.valid() && s.A-r.span > now
}

// Reserve decides a reservation of cost units at now on the states of s's
// transitions (s must be Reservable), waiting at most maxWait (clamped by
// MaxWait). When every transition fits within the wait, all are charged for
// the instant now+wait, next receives their states and the Verdict is
// allowed with RetryAfter the wait; else nothing is charged, next is a copy
// of states, and the Verdict is denied with RetryAfter the wait it would
// need (Never when the cost exceeds a capacity). The Verdict is driven by
// the transition with the longest wait.
func (s *Set) Reserve(states, next []State, now, cost, maxWait int64, source string) Verdict {
	var ds [MaxTransitions]Decision
	var waits [MaxTransitions]int64
	wait := int64(0)
	for i := range s.ts {
		waits[i] = s.ts[i].Wait(states[i], now, cost)
		wait = max(wait, waits[i])
	}
	copy(next, states[:len(s.ts)])
	if wait > s.MaxWait(maxWait) {
		for i := range s.ts {
			_, ds[i] = s.ts[i].Step(states[i], now, 0)
			ds[i].Allowed = false
			ds[i].RetryAfter = dur(waits[i])
		}
		return s.CombineReserve(ds[:len(s.ts)], source)
	}
	for i := range s.ts {
		next[i], ds[i] = s.ts[i].ReserveAt(states[i], now, now+wait, cost)
	}
	return s.CombineReserve(ds[:len(s.ts)], source)
}

// CombineReserve folds the decisions of a reservation, one per transition,
// into a Verdict: the transition with the longest wait drives it (the
// fewest remaining among equal waits). The decisions are all allowed or all
// denied. Engines that compute the decisions themselves (Redis's script)
// fold them here.
func (s *Set) CombineReserve(ds []Decision, source string) Verdict {
	drive := 0
	for i, d := range ds {
		if d.RetryAfter > ds[drive].RetryAfter || (d.RetryAfter == ds[drive].RetryAfter && d.Remaining < ds[drive].Remaining) {
			drive = i
		}
	}
	return Verdict{Decision: ds[drive], Index: drive, Source: source}
}
