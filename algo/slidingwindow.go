package algo

// SlidingWindow estimates the units of the last Period from two counters:
// the current window's and the previous window's, the latter weighted by the
// part of it the sliding period still covers. With P the period, e the time
// since the current window began, and Q the rate:
//
//	used = ceil(prev × (P−e) / P) + cur,   a request of n passes if used+n ≤ Q
//
// Because cur, n and Q are integers, rounding the weighted part up gives the
// same verdict as exact rational arithmetic, and makes Remaining = Q − used
// exact. Windows start at multiples of P since the epoch.
//
// State: A is the expiry, as for every algorithm: two periods after the
// start of the current counter's window while it counts anything, one period
// after while only the previous one does. B packs the previous count (high
// 32 bits) and the current count (low 32 bits). The window start follows
// from A, the counts and P.

func packCounts(prev, cur int64) int64 { return prev<<32 | cur }

func unpackCounts(b int64) (prev, cur int64) { return b >> 32, b & (1<<32 - 1) }

// slidingState builds the State of the window starting at ws.
func (r *Transition) slidingState(ws, prev, cur int64) State {
	switch {
	case cur > 0:
		return State{A: ws + 2*r.span, B: packCounts(prev, cur)}
	case prev > 0:
		return State{A: ws + r.span, B: packCounts(prev, 0)}
	}
	return State{}
}

// slidingCounts returns the window holding now and its two counters, rolled
// forward from s. When the clock stepped back behind s, it decides at the
// start of s's window instead.
func (r *Transition) slidingCounts(s State, now int64) (ws, prev, cur, at int64) {
	ws = now - now%r.span
	if s.A <= now {
		return ws, 0, 0, now
	}
	sPrev, sCur := unpackCounts(s.B)
	sws := s.A - r.span
	if sCur > 0 {
		sws -= r.span
	}
	switch {
	case sws == ws:
		return ws, sPrev, sCur, now
	case sws == ws-r.span:
		return ws, sCur, 0, now
	case sws > ws:
		return sws, sPrev, sCur, sws
	}
	return ws, 0, 0, now
}

func (r *Transition) stepSliding(s State, now, cost int64) (State, Decision) {
	ws, prev, cur, now := r.slidingCounts(s, now)
	p := r.span
	elapsed := now - ws
	used := mulDivCeil(prev, p-elapsed, p) + cur
	if cost == 0 {
		return s, Decision{Allowed: true, Remaining: nonNeg(r.capacity - used), ResetAfter: dur(r.slidingReset(ws, prev, cur, now))}
	}
	if used+cost > r.capacity {
		return s, Decision{
			Remaining:  nonNeg(r.capacity - used),
			ResetAfter: dur(r.slidingReset(ws, prev, cur, now)),
			RetryAfter: dur(r.slidingRetry(prev, cur, cost, elapsed)),
		}
	}
	cur += cost
	return r.slidingState(ws, prev, cur), Decision{
		Allowed:    true,
		Remaining:  r.capacity - used - cost,
		ResetAfter: dur(r.slidingReset(ws, prev, cur, now)),
	}
}

// slidingRetry is the time from elapsed (into the current window) until a
// request of cost passes, assuming nothing else does.
//
// In this window it passes once prev×(P−e) ≤ (Q−cur−cost)×P, i.e. from
// e = P − floor((Q−cur−cost)×P/prev). If cur+cost > Q it must wait for the
// next window, where cur becomes the previous count and the same reasoning
// gives e' = P − floor((Q−cost)×P/cur).
func (r *Transition) slidingRetry(prev, cur, cost, elapsed int64) int64 {
	p, q := r.span, r.capacity
	if cur+cost <= q {
		if prev == 0 {
			return 0 // not denied; kept for safety, the division needs prev > 0
		}
		return max(p-mulDiv(q-cur-cost, p, prev)-elapsed, 0)
	}
	next := int64(0)
	if cur > 0 { // always, since cur+cost > q ≥ cost
		next = max(p-mulDiv(q-cost, p, cur), 0)
	}
	return p - elapsed + next
}

// slidingReset is how long until the estimate is zero, which is when the
// state expires.
func (r *Transition) slidingReset(ws, prev, cur, now int64) int64 {
	if st := r.slidingState(ws, prev, cur); st.A > now {
		return st.A - now
	}
	return 0
}

func (r *Transition) refundSliding(s State, now, cost int64) State {
	ws, prev, cur, _ := r.slidingCounts(s, now)
	return r.slidingState(ws, prev, max(cur-cost, 0))
}
