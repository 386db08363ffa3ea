package floodgate

import "time"

// FixedWindow counts units per window. State: A is the end of the window the
// count belongs to (its expiry), B the count. A state whose window has ended
// is a fresh window.

func (r *Rule) stepFixed(s State, now, cost int64) (State, Decision) {
	end, count := s.A, s.B
	if end <= now {
		end, count = r.windowStart(now)+r.span, 0
	} else if start := end - r.span; start > now {
		now = start // the clock stepped back: never decide before the window began
	}
	reset := int64(0)
	if count > 0 {
		reset = end - now
	}
	if cost == 0 {
		return s, Decision{Allowed: true, Remaining: nonNeg(r.capacity - count), ResetAfter: dur(reset)}
	}
	if count+cost > r.capacity {
		return s, Decision{Remaining: nonNeg(r.capacity - count), ResetAfter: dur(reset), RetryAfter: dur(end - now)}
	}
	return State{A: end, B: count + cost}, Decision{Allowed: true, Remaining: r.capacity - count - cost, ResetAfter: dur(end - now)}
}

// windowStart is the start of the window holding now: a multiple of the
// period since the epoch, shifted by the zone offset when the limit follows a
// location's wall clock. The offset is the one in force at now, so windows
// around a daylight-saving change are one hour shorter or longer.
func (r *Rule) windowStart(now int64) int64 {
	off := int64(0)
	if r.Location != nil {
		_, secs := time.Unix(0, now).In(r.Location).Zone()
		off = int64(secs) * int64(time.Second)
	}
	t := now + off
	m := t % r.span
	if m < 0 {
		m += r.span
	}
	return t - m - off
}

func (r *Rule) refundFixed(s State, now, cost int64) State {
	if s.A <= now || s.B == 0 {
		return State{}
	}
	if s.B <= cost {
		return State{}
	}
	s.B -= cost
	return s
}
