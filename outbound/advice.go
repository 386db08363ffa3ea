package outbound

import (
	"net/http"
	"strings"
	"time"
)

// maxAdviceSeconds caps every number of seconds read from a response, so
// that a server's garbage cannot overflow a time.Duration. The Transport
// caps pauses far lower (Options.MaxPause).
const maxAdviceSeconds = 1 << 32

// unixThreshold is where an X-RateLimit-Reset value stops being a number
// of seconds and becomes a Unix time: 10^9 seconds is 31 years, longer than
// any quota window, and 10^9 as a Unix time is 2001, before any API that
// sends the field.
const unixThreshold = 1_000_000_000

// Advice is what one response says about its upstream's budget. Every
// duration is measured from the moment the response was read and is never
// negative; a field that was absent, garbage or negative is not Known.
type Advice struct {
	// RetryAfter is the Retry-After field (delta-seconds or an HTTP-date;
	// a date in the past is 0).
	RetryAfter      time.Duration
	RetryAfterKnown bool

	// Remaining is the fewest units the server says are left, over the
	// items of the RateLimit field or, without it, X-RateLimit-Remaining.
	Remaining      int64
	RemainingKnown bool

	// Reset is when the quota that Remaining describes is replenished:
	// the t parameter of that RateLimit item (the longest of the items
	// with nothing left) or X-RateLimit-Reset, in seconds or, from 10^9
	// on, as a Unix time.
	Reset      time.Duration
	ResetKnown bool
}

// ParseAdvice reads the rate-limit fields of h as of now: Retry-After,
// the IETF RateLimit field (draft-ietf-httpapi-ratelimit-headers, the
// syntax floodgate's httplimit writes: `"name";r=<remaining>;t=<seconds>`,
// one item per quota, and the older `limit=, remaining=, reset=`
// dictionary), and the X-RateLimit-Remaining and X-RateLimit-Reset fields.
// RateLimit wins over X-RateLimit-* when both are present, as it is the
// one with a specification. Nothing it reads can make it fail: what it
// cannot read it leaves unknown.
func ParseAdvice(h http.Header, now time.Time) Advice {
	var a Advice
	if v := h.Values("Retry-After"); len(v) > 0 {
		a.RetryAfter, a.RetryAfterKnown = ParseRetryAfter(v[0], now)
	}
	if v := h.Values("Ratelimit"); len(v) > 0 {
		a.Remaining, a.RemainingKnown, a.Reset, a.ResetKnown = parseRateLimit(strings.Join(v, ","))
	}
	if !a.RemainingKnown {
		if n, ok := parseCount(h.Get("X-Ratelimit-Remaining")); ok {
			a.Remaining, a.RemainingKnown = n, true
		}
	}
	if !a.ResetKnown {
		if n, ok := parseCount(h.Get("X-Ratelimit-Reset")); ok {
			a.Reset, a.ResetKnown = resetDuration(n, now), true
		}
	}
	return a
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

// parseCount reads a non-negative decimal integer, capped at
// maxAdviceSeconds. Signs, spaces inside, fractions and empty strings are
// not counts.
func parseCount(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < maxAdviceSeconds {
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, maxAdviceSeconds), true
}

func seconds(n int64) time.Duration { return time.Duration(min(n, maxAdviceSeconds)) * time.Second }

// resetDuration reads an X-RateLimit-Reset number: seconds below
// unixThreshold, a Unix time from it on.
func resetDuration(n int64, now time.Time) time.Duration {
	if n < unixThreshold {
		return seconds(n)
	}
	return max(time.Unix(n, 0).Sub(now), 0)
}

// parseRateLimit reads the RateLimit field: the fewest remaining over its
// items and the reset that goes with it. An item without an r (or
// remaining) parameter says nothing and is skipped; a member that is not
// an item at all ends the parse with what was read before it.
func parseRateLimit(v string) (remaining int64, remKnown bool, reset time.Duration, resetKnown bool) {
	var dictReset time.Duration
	var dictResetKnown bool
	for _, member := range splitMembers(v) {
		r, rOK, t, tOK := parseMember(member)
		if !rOK {
			if tOK {
				dictReset, dictResetKnown = t, true
			}
			continue
		}
		// The driving quota is the one with the fewest units left; among
		// exhausted ones, the one that comes back last.
		switch {
		case !remKnown || r < remaining:
			remaining, remKnown, reset, resetKnown = r, true, t, tOK
		case r == remaining && tOK && (!resetKnown || t > reset):
			reset, resetKnown = t, true
		}
	}
	if remKnown && !resetKnown && dictResetKnown {
		reset, resetKnown = dictReset, true
	}
	return remaining, remKnown, reset, resetKnown
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

// parseMember reads one member: an item with r and t parameters
// (`"name";r=0;t=30`), or one member of the older dictionary
// (`remaining=0` or `reset=30`), which carries one number per member.
func parseMember(m string) (r int64, rOK bool, t time.Duration, tOK bool) {
	parts := strings.Split(strings.TrimSpace(m), ";")
	head := strings.TrimSpace(parts[0])
	if k, val, ok := strings.Cut(head, "="); ok && !strings.HasPrefix(head, `"`) {
		// The dictionary form of earlier drafts.
		n, ok := parseCount(val)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "remaining":
			return n, ok, 0, false
		case "reset":
			return 0, false, seconds(n), ok
		}
		return 0, false, 0, false
	}
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		n, ok := parseCount(val)
		if !ok {
			continue
		}
		switch k {
		case "r":
			r, rOK = n, true
		case "t":
			t, tOK = seconds(n), true
		}
	}
	return r, rOK, t, tOK
}
