package outbound

import (
	"math"
	"sync"
	"time"
)

// The Transport learns, per upstream, the rate its server really admits
// (AIMD: additive increase, multiplicative decrease). Until a server
// refuses, nothing is learned and nothing is paced. A refusal
// (Advice.Refused) halves the rate the upstream was being sent at: the
// learned rate, the advertised one (Advice.Rate) or the measured rate of
// the last sends, whichever is lowest. Requests are then paced at it, one
// every 1/rate, with no burst. Every learnRun answers admitted in a row
// raise it by a learnSteps-th of the rate the last decrease started from
// (the limit observed), up to the highest rate a decrease ever started
// from and never above the advertised rate; it never falls below one
// request per MaxPause.
//
// A refusal lowers the rate only when it answers a request sent after the
// last decrease (callers in flight at the old rate are one signal, not
// many), and, after the first decrease, only when the server admitted a
// request since: a server that refuses everything (an outage, a quota
// spent for the day) is waited out by its pauses, not learned as a rate
// that would outlast it.
//
// The learned rate only ever holds requests back: the Limiter (the
// user's budget) and the server's pauses still apply on top of it.
const (
	learnDecrease = 0.5
	learnRun      = 10
	learnSteps    = 20
	// The measured rate is that of the last learnSamples sends within
	// learnHorizon, when at least learnMinSamples were: fewer say more of
	// a burst than of a rate, so an upstream called more rarely learns
	// only from an advertised rate.
	learnSamples    = 16
	learnMinSamples = 8
	learnHorizon    = 10 * time.Second
)

// learner is the learned rate of one upstream.
type learner struct {
	mu   sync.Mutex
	min  float64   // the lowest rate: one request per MaxPause
	rate float64   // requests per second; 0 until a refusal taught one
	ceil float64   // the rate never rises above it
	adv  float64   // the rate the server last advertised; 0 unknown
	cut  time.Time // when the rate was last lowered
	from float64   // the rate that decrease started from
	ok   bool      // an answer was admitted since the last decrease
	run  int       // answers admitted in a row since
	next time.Time // the earliest instant of the next paced send

	sent  [learnSamples]time.Time // ring of the last sends
	nSent int
}

// reserve returns the instant at which a request sent no sooner than now
// keeps to the learned rate, and takes that slot, unless it comes after
// deadline (when hasDeadline): then nothing is taken and ok is false.
func (l *learner) reserve(now, deadline time.Time, hasDeadline bool) (at time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rate == 0 {
		return now, true
	}
	at = now
	if l.next.After(at) {
		at = l.next
	}
	if hasDeadline && !at.Before(deadline) {
		return time.Time{}, false
	}
	l.next = at.Add(interval(l.rate))
	return at, true
}

// cancel gives back the slot at, when no later one was taken since.
func (l *learner) cancel(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rate > 0 && l.next.Equal(at.Add(interval(l.rate))) {
		l.next = at
	}
}

// sending records that a request is sent at now.
func (l *learner) sending(now time.Time) {
	l.mu.Lock()
	l.sent[l.nSent%learnSamples] = now
	l.nSent++
	l.mu.Unlock()
}

// measured returns the rate of the sends within learnHorizon of now, or 0
// when fewer than two were.
func (l *learner) measured(now time.Time) float64 {
	n := min(l.nSent, learnSamples)
	if n < learnMinSamples {
		return 0
	}
	last := l.sent[(l.nSent-1)%learnSamples]
	first, k := last, 0
	for i := range n {
		t := l.sent[(l.nSent-1-i)%learnSamples]
		if now.Sub(t) > learnHorizon {
			break
		}
		first, k = t, i+1
	}
	span := last.Sub(first)
	if k < learnMinSamples || span <= 0 {
		return 0
	}
	return float64(k-1) / span.Seconds()
}

// observe learns from the answer to a request sent at sentAt and read at
// now: refused by its server (Advice.Refused), admitted (any other answer
// but a server error), and the rate the server advertised (0 for none).
func (l *learner) observe(sentAt, now time.Time, refused, admitted bool, advertised float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if advertised > 0 {
		l.adv = advertised
		if l.ceil > advertised {
			l.ceil = advertised
		}
		if l.rate > advertised {
			l.rate = max(advertised, l.min)
		}
	}
	switch {
	case refused:
		if !sentAt.After(l.cut) || (l.rate > 0 && !l.ok) {
			return
		}
		base := math.Inf(1)
		for _, r := range [...]float64{l.rate, l.adv, l.measured(now)} {
			if r > 0 && r < base {
				base = r
			}
		}
		if math.IsInf(base, 1) {
			// Nothing to halve: the pause alone answers.
			return
		}
		l.ceil = max(l.ceil, base)
		if l.adv > 0 {
			l.ceil = min(l.ceil, l.adv)
		}
		l.from = base
		l.rate = max(base*learnDecrease, l.min)
		l.cut, l.ok, l.run = now, false, 0
	case admitted && l.rate > 0 && sentAt.After(l.cut):
		l.ok = true
		l.run++
		if l.run >= learnRun {
			l.run = 0
			l.rate = max(min(l.rate+l.from/learnSteps, l.ceil), l.min)
		}
	}
}

// learned returns the learned rate, 0 when none.
func (l *learner) learned() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// interval is the time between two sends at rate per second.
func interval(rate float64) time.Duration {
	return time.Duration(float64(time.Second) / rate)
}
