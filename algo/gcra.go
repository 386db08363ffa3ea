package algo

// GCRA keeps one timestamp per key, the theoretical arrival time (TAT): the
// instant at which the bucket would be full again. With T = Period/Rate and a
// capacity of B units, the bucket spans B×T of time; a request of n units
// moves the TAT n×T forward and passes if the TAT then lies at most B×T
// ahead of now. Everything is integer nanoseconds, so Remaining is exact: a
// fresh PerSecond(10) bucket has 9 remaining after one request, not 8.

func (r *Transition) stepGCRA(s State, now, cost int64) (State, Decision) {
	tat := max(s.A, now)
	if cost == 0 {
		return s, Decision{Allowed: true, Remaining: r.gcraRemaining(tat, now), ResetAfter: dur(tat - now)}
	}
	next := tat + cost*r.interval
	if over := next - now - r.span; over > 0 {
		return s, Decision{
			Remaining:  r.gcraRemaining(tat, now),
			ResetAfter: dur(tat - now),
			RetryAfter: dur(over), // at now+over, next-now equals the span exactly
		}
	}
	return State{A: next}, Decision{Allowed: true, Remaining: r.gcraRemaining(next, now), ResetAfter: dur(next - now)}
}

func (r *Transition) gcraRemaining(tat, now int64) int64 {
	return nonNeg(r.span-(tat-now)) / r.interval
}

func (r *Transition) refundGCRA(s State, now, cost int64) State {
	if s.A <= now {
		return State{}
	}
	tat := s.A - cost*r.interval
	if tat <= now {
		return State{}
	}
	return State{A: tat}
}
