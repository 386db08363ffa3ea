package algo

import "time"

// FixedWindow counts units per window. State: A is the end of the window the
// count belongs to (its expiry), B the count. A state whose window has ended
// is a fresh window.

func (r *Transition) stepFixed(s State, now, cost int64) (State, Decision) {
	end, count := s.A, s.B
	if end <= now {
		_, end = r.Window(now)
		count = 0
	} else if start, _ := r.Window(end - 1); start > now {
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

// Window returns the window of a FixedWindow transition that holds now:
// [start, end) in Unix nanoseconds. Windows are multiples of the period
// since the epoch; with a location, they follow its wall clock. A period of
// whole days then runs from local midnight to local midnight by the
// calendar, so a day is 23 or 25 hours long across a daylight-saving change
// and always resets at midnight; shorter periods shift by the zone offset in
// force at now.
func (r *Transition) Window(now int64) (start, end int64) {
	if r.days > 0 {
		return r.calendarWindow(now)
	}
	off := int64(0)
	if r.spec.Location != nil {
		_, secs := time.Unix(0, now).In(r.spec.Location).Zone()
		off = int64(secs) * int64(time.Second)
	}
	t := now + off
	m := t % r.span
	if m < 0 {
		m += r.span
	}
	start = t - m - off
	return start, start + r.span
}

// calendarWindow is Window for periods of whole days in a location.
func (r *Transition) calendarWindow(now int64) (start, end int64) {
	y, m, d := time.Unix(0, now).In(r.spec.Location).Date()
	// The civil day number of now's local date; the date arithmetic below is
	// done by time.Date, which normalises day numbers past a month's end.
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
	first := day - ((day%r.days)+r.days)%r.days
	start = time.Date(1970, 1, 1+int(first), 0, 0, 0, 0, r.spec.Location).UnixNano()
	end = time.Date(1970, 1, 1+int(first+r.days), 0, 0, 0, 0, r.spec.Location).UnixNano()
	// A zone may skip its midnight; the window still holds now.
	return min(start, now), max(end, now+1)
}

func (r *Transition) refundFixed(s State, now, cost int64) State {
	if s.A <= now || s.B == 0 {
		return State{}
	}
	if s.B <= cost {
		return State{}
	}
	s.B -= cost
	return s
}
