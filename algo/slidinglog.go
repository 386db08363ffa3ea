package algo

// SlidingLog remembers when each admitted unit passed and counts those of
// the last Period: exact for any sliding period, at the price of memory that
// grows with the rate (one entry per request, merged per instant).

// A Log is the state of one SlidingLog limit for one key: the admissions of
// the last period, oldest first. The zero Log is a key never seen.
type Log struct {
	entries []logEntry // entries[head:] are live
	head    int
	total   int64 // units in entries[head:]
	expiry  int64 // when the newest admission stops counting
}

type logEntry struct{ at, n int64 }

// prune drops the admissions that no longer count at now: an admission at t
// counts during [t, t+Period).
func (r *Transition) prune(l *Log, now int64) {
	for l.head < len(l.entries) && l.entries[l.head].at+r.span <= now {
		l.total -= l.entries[l.head].n
		l.head++
	}
	if l.head == len(l.entries) {
		l.entries, l.head = l.entries[:0], 0
	} else if l.head > len(l.entries)/2 {
		n := copy(l.entries, l.entries[l.head:])
		l.entries, l.head = l.entries[:n], 0
	}
}

// CheckLog is Step for SlidingLog rules: it decides whether cost units may
// pass at now under l without charging them (it only drops admissions that
// have expired). For an allowed request the Decision is the one after the
// charge; charge it with ChargeLog once every limit of the policy agrees.
func (r *Transition) CheckLog(l *Log, now, cost int64) Decision {
	if cost > r.capacity || cost < 0 || !r.valid() {
		return never
	}
	now = l.clamp(now)
	r.prune(l, now)
	used := l.total
	if cost > 0 && used+cost <= r.capacity {
		return Decision{Allowed: true, Remaining: r.capacity - used - cost, ResetAfter: dur(r.span)}
	}
	d := Decision{Allowed: cost == 0, Remaining: nonNeg(r.capacity - used)}
	if n := len(l.entries); n > l.head {
		d.ResetAfter = dur(l.entries[n-1].at + r.span - now)
	}
	if !d.Allowed {
		// Wait until enough of the oldest admissions expire.
		need := used + cost - r.capacity
		for _, e := range l.entries[l.head:] {
			need -= e.n
			if need <= 0 {
				d.RetryAfter = dur(e.at + r.span - now)
				break
			}
		}
	}
	return d
}

// ChargeLog records cost units admitted at now in l.
func (r *Transition) ChargeLog(l *Log, now, cost int64) {
	if cost <= 0 || !r.valid() {
		return
	}
	now = l.clamp(now)
	if n := len(l.entries); n > l.head && l.entries[n-1].at == now {
		l.entries[n-1].n += cost
	} else {
		l.entries = append(l.entries, logEntry{at: now, n: cost})
	}
	l.total += cost
	l.expiry = now + r.span
}

// clamp keeps a decision from happening before the newest admission of l, so
// a clock that steps back never reorders the log.
func (l *Log) clamp(now int64) int64 {
	if n := len(l.entries); n > 0 && l.entries[n-1].at > now {
		return l.entries[n-1].at
	}
	return now
}

// RefundLog gives back up to cost units of the newest admissions in l.
func (r *Transition) RefundLog(l *Log, now, cost int64) {
	r.prune(l, now)
	for cost > 0 && len(l.entries) > l.head {
		e := &l.entries[len(l.entries)-1]
		take := min(cost, e.n)
		e.n -= take
		l.total -= take
		cost -= take
		if e.n == 0 {
			l.entries = l.entries[:len(l.entries)-1]
		}
	}
	l.expiry = 0
	if n := len(l.entries); n > l.head {
		l.expiry = l.entries[n-1].at + r.span
	}
}

// Clone returns a copy of l that shares nothing with it.
func (l *Log) Clone() *Log {
	c := *l
	c.entries = append([]logEntry(nil), l.entries...)
	return &c
}

// Expiry is the instant (Unix ns) from which l carries no information: when
// its newest admission stops counting, or 0 for an empty log.
func (l *Log) Expiry() int64 { return l.expiry }
