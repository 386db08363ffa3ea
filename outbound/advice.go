package outbound

import (
	"net/http"
	"strings"
	"time"
)

// maxAdviceSeconds caps every count and delta-seconds read from a
// response, so that a server's garbage cannot overflow a time.Duration.
// The Transport caps pauses far lower (Options.MaxPause).
const maxAdviceSeconds = 1 << 32

// A reset number (X-RateLimit-Reset, RateLimit-Reset, the t parameter of
// RateLimit, ...) is read by its magnitude, as servers send three kinds:
// below unixThreshold it is delta-seconds (10^9 seconds is 31 years, longer
// than any quota window); from unixThreshold on a Unix time in seconds
// (10^9 is 2001, before any API sent the field); from unixMilliThreshold
// on a Unix time in milliseconds (10^12 seconds would be the year 33658,
// while 10^12 milliseconds is 2001 again).
const (
	unixThreshold      = 1_000_000_000
	unixMilliThreshold = 1_000_000_000_000
	// maxResetNumber saturates the integer part of a reset number: past
	// it, a millisecond Unix time is more than 30,000 years away.
	maxResetNumber = 1 << 50
)

// Advice is what one response says about its upstream's budget. Every
// duration is measured from the moment the response was read and is never
// negative; a field that was absent, garbage or negative is not Known.
type Advice struct {
	// RetryAfter is the Retry-After field (delta-seconds or an HTTP-date;
	// a date in the past is 0).
	RetryAfter      time.Duration
	RetryAfterKnown bool

	// Remaining is the fewest units the server says are left: over the
	// items of the RateLimit field or, without it, RateLimit-Remaining,
	// or else X-RateLimit-Remaining.
	Remaining      int64
	RemainingKnown bool

	// Reset is when the quota that Remaining describes is replenished:
	// the t parameter of that RateLimit item (the longest of the items
	// with nothing left), or else RateLimit-Reset, or else
	// X-RateLimit-Reset-After, or else X-RateLimit-Reset. Each is read as
	// delta-seconds, a Unix time in seconds or one in milliseconds by its
	// magnitude (see ParseReset).
	Reset      time.Duration
	ResetKnown bool

	// Limit is the size of the quota Remaining counts down from: the
	// limit= member of the RateLimit dictionary, or else the first member
	// of RateLimit-Limit, or else X-RateLimit-Limit.
	Limit      int64
	LimitKnown bool

	// Rate is the rate the server advertises, in requests per second: the
	// lowest q/w over the items of RateLimit-Policy, or else over the
	// quota policies of RateLimit-Limit that name their window
	// (`100;w=60`). 0 when no field names a window: a bare limit, as
	// X-RateLimit-Limit is, says how many but not per how long.
	Rate float64
}

// ParseAdvice reads the rate-limit fields of h as of now:
//
//   - Retry-After;
//   - the IETF RateLimit and RateLimit-Policy fields
//     (draft-ietf-httpapi-ratelimit-headers, the syntax floodgate's
//     httplimit writes: `"name";r=<remaining>;t=<seconds>` and
//     `"name";q=<quota>;w=<seconds>`, one item per quota), and the
//     `limit=, remaining=, reset=` dictionary of earlier drafts;
//   - the separate RateLimit-Limit, RateLimit-Remaining and
//     RateLimit-Reset fields of the earliest drafts (still sent by GitLab);
//   - X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset and
//     X-RateLimit-Reset-After (Discord's, in seconds with a fraction).
//
// For each of Remaining, Reset and Limit the first family that has it
// wins, in that order: the newer specification first. Nothing it reads
// can make it fail: what it cannot read it leaves unknown.
func ParseAdvice(h http.Header, now time.Time) Advice {
	var a Advice
	if v := h.Values("Retry-After"); len(v) > 0 {
		a.RetryAfter, a.RetryAfterKnown = ParseRetryAfter(v[0], now)
	}
	if v := h.Values("Ratelimit"); len(v) > 0 {
		parseRateLimit(&a, strings.Join(v, ","), now)
	}
	if v := h.Values("Ratelimit-Policy"); len(v) > 0 {
		a.Rate = policyRate(strings.Join(v, ","))
	}
	if v := h.Get("Ratelimit-Limit"); v != "" {
		members := splitMembers(v)
		if !a.LimitKnown {
			it := parseItem(members[0])
			if n, ok := parseCount(it.head); ok {
				a.Limit, a.LimitKnown = n, true
			}
		}
		if a.Rate == 0 {
			a.Rate = policyRate(v)
		}
	}
	if !a.RemainingKnown {
		a.Remaining, a.RemainingKnown = firstCount(h, "Ratelimit-Remaining", "X-Ratelimit-Remaining")
	}
	if !a.LimitKnown {
		a.Limit, a.LimitKnown = firstCount(h, "X-Ratelimit-Limit")
	}
	for _, k := range [...]string{"Ratelimit-Reset", "X-Ratelimit-Reset-After", "X-Ratelimit-Reset"} {
		if a.ResetKnown {
			break
		}
		if v := h.Get(k); v != "" {
			a.Reset, a.ResetKnown = ParseReset(v, now)
		}
	}
	return a
}

// firstCount reads the first of the fields keys that holds a count.
func firstCount(h http.Header, keys ...string) (int64, bool) {
	for _, k := range keys {
		if n, ok := parseCount(h.Get(k)); ok {
			return n, true
		}
	}
	return 0, false
}

// Refused reports whether an answer of status code with advice a is its
// server refusing for its rate limit: a 429, or a 503 that carries
// Retry-After or a rate-limit field.
func (a Advice) Refused(code int) bool {
	switch code {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		return a.RetryAfterKnown || a.RemainingKnown || a.ResetKnown || a.LimitKnown || a.Rate > 0
	}
	return false
}

// Wait returns how long an answer of status code with advice a asks its
// caller to hold off, and whether it names a wait at all: a 429 its
// Retry-After, else its reset; a 503 its Retry-After; any answer that
// says nothing is left, its reset.
func (a Advice) Wait(code int) (time.Duration, bool) {
	switch {
	case code == http.StatusTooManyRequests && a.RetryAfterKnown:
		return a.RetryAfter, true
	case code == http.StatusTooManyRequests && a.ResetKnown:
		return a.Reset, true
	case code == http.StatusServiceUnavailable && a.RetryAfterKnown:
		return a.RetryAfter, true
	case a.RemainingKnown && a.Remaining == 0 && a.ResetKnown:
		return a.Reset, true
	}
	return 0, false
}

// ParseRetryAfter reads a Retry-After value (RFC 9110, section 10.2.3):
// delta-seconds or an HTTP-date. A date in the past is 0. A negative,
// fractional or otherwise malformed value is not ok: the field is then
// ignored, as RFC 9110 asks of an invalid field.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, ok := parseCount(v); ok {
		return seconds(n), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// ParseReset reads a reset number as of now, by its magnitude: below 10^9
// it is delta-seconds; from 10^9 on a Unix time in seconds; from 10^12 on
// a Unix time in milliseconds. Each may carry a decimal fraction
// (`1.25`, `1772366430.5`). A time in the past is 0. A sign, an exponent
// or anything else that is not a non-negative decimal is not ok.
func ParseReset(v string, now time.Time) (time.Duration, bool) {
	n, nano, ok := parseDecimal(v)
	if !ok {
		return 0, false
	}
	switch {
	case n >= unixMilliThreshold:
		at := time.UnixMilli(n).Add(time.Duration(nano / 1e3)) // billionths of a millisecond
		return max(at.Sub(now), 0), true
	case n >= unixThreshold:
		return max(time.Unix(n, nano).Sub(now), 0), true
	}
	return time.Duration(n)*time.Second + time.Duration(nano), true
}

// parseCount reads a non-negative decimal integer, capped at
// maxAdviceSeconds. Signs, spaces inside, fractions and empty strings are
// not counts.
func parseCount(v string) (int64, bool) {
	n, ok := parseDigits(strings.TrimSpace(v), maxAdviceSeconds)
	return n, ok
}

// parseDigits reads a non-empty run of decimal digits, saturating at
// limit.
func parseDigits(v string, limit int64) (int64, bool) {
	if v == "" || len(v) > 64 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < limit {
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, limit), true
}

// parseDecimal reads a non-negative decimal number with an optional
// fraction: its integer part, saturated at maxResetNumber, and its
// fraction in billionths (digits past the ninth are dropped).
func parseDecimal(v string) (whole, nano int64, ok bool) {
	v = strings.TrimSpace(v)
	intPart, frac, hasFrac := strings.Cut(v, ".")
	if whole, ok = parseDigits(intPart, maxResetNumber); !ok {
		return 0, 0, false
	}
	if !hasFrac {
		return whole, 0, true
	}
	if frac == "" || len(frac) > 64 {
		return 0, 0, false
	}
	scale := int64(1e8)
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		nano += int64(c-'0') * scale
		scale /= 10
	}
	return whole, nano, true
}

func seconds(n int64) time.Duration { return time.Duration(min(n, maxAdviceSeconds)) * time.Second }

// parseRateLimit reads the RateLimit field into a: the fewest remaining
// over its items and the reset that goes with it. An item without an r (or
// remaining) parameter says nothing and is skipped.
func parseRateLimit(a *Advice, v string, now time.Time) {
	var dictReset time.Duration
	var dictResetKnown bool
	for _, member := range splitMembers(v) {
		it := parseItem(member)
		if it.dict {
			// A member of the dictionary of earlier drafts: one number.
			switch strings.ToLower(it.key) {
			case "remaining":
				it.r, it.rOK = parseCount(it.val)
			case "reset":
				dictReset, dictResetKnown = ParseReset(it.val, now)
			case "limit":
				if n, ok := parseCount(it.val); ok {
					a.Limit, a.LimitKnown = n, true
				}
			}
		}
		if !it.rOK {
			continue
		}
		t, tOK := time.Duration(0), false
		if it.t != "" {
			t, tOK = ParseReset(it.t, now)
		}
		// The driving quota is the one with the fewest units left; among
		// exhausted ones, the one that comes back last.
		switch {
		case !a.RemainingKnown || it.r < a.Remaining:
			a.Remaining, a.RemainingKnown, a.Reset, a.ResetKnown = it.r, true, t, tOK
		case it.r == a.Remaining && tOK && (!a.ResetKnown || t > a.Reset):
			a.Reset, a.ResetKnown = t, true
		}
	}
	if a.RemainingKnown && !a.ResetKnown && dictResetKnown {
		a.Reset, a.ResetKnown = dictReset, true
	}
}

// policyRate reads the quota policies of a RateLimit-Policy or an older
// RateLimit-Limit field (`"name";q=100;w=60`, `100;w=60`) and returns the
// lowest of their rates per second, or 0 when none names both its quota
// and a window of at least a second.
func policyRate(v string) float64 {
	var rate float64
	for _, member := range splitMembers(v) {
		it := parseItem(member)
		q, qOK := it.q, it.qOK
		if !qOK && !it.dict {
			// `100;w=60`: the quota is the item itself.
			q, qOK = parseCount(it.head)
		}
		if !qOK || q == 0 || !it.wOK || it.w == 0 {
			continue
		}
		if r := float64(q) / float64(it.w); rate == 0 || r < rate {
			rate = r
		}
	}
	return rate
}

// splitMembers splits a structured-field list at the commas outside
// quoted strings.
func splitMembers(v string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, v[start:i])
				start = i + 1
			}
		}
	}
	return append(out, v[start:])
}

// item is one member of a rate-limit field: an item with parameters
// (`"name";r=0;t=30`, `100;w=60`) or, when dict is set, one member of the
// dictionary of earlier drafts (`remaining=0`), key and val.
type item struct {
	head     string
	dict     bool
	key, val string
	r, q, w  int64
	rOK, qOK bool
	wOK      bool
	t        string // raw: a reset number, read with ParseReset
}

// parseItem reads one member. Parameters it does not know, and those whose
// value is not a count, are skipped.
func parseItem(m string) item {
	var it item
	m = strings.TrimSpace(m)
	head, params, _ := strings.Cut(m, ";")
	it.head = strings.TrimSpace(head)
	if k, val, ok := strings.Cut(it.head, "="); ok && !strings.HasPrefix(it.head, `"`) {
		it.dict, it.key, it.val = true, strings.TrimSpace(k), val
		return it
	}
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		if k == "t" {
			it.t = val
			continue
		}
		n, ok := parseCount(val)
		if !ok {
			continue
		}
		switch k {
		case "r":
			it.r, it.rOK = n, true
		case "q":
			it.q, it.qOK = n, true
		case "w":
			it.w, it.wOK = n, true
		}
	}
	return it
}
