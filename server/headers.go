package server

import (
	"math/bits"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// The check API and the Envoy API answer with the same rate-limit fields as
// httplimit's middleware. httplimit writes them only around a handler it
// wraps, so this file formats them from a decision the same way: the
// X-RateLimit trio of the driving check, Retry-After on a denial, and the
// RateLimit-Policy / RateLimit structured fields listing every check
// decided. An exported httplimit function writing the fields of
// (checks, driving index) into an http.Header would replace it.

// A field is one header field of a decision, name in canonical form.
type field struct{ name, value string }

const (
	hdrLimit      = "X-Ratelimit-Limit"
	hdrRemaining  = "X-Ratelimit-Remaining"
	hdrReset      = "X-Ratelimit-Reset"
	hdrSource     = "X-Ratelimit-Source"
	hdrRetryAfter = "Retry-After"
	hdrRateLimit  = "Ratelimit"
	hdrPolicy     = "Ratelimit-Policy"

	// maxSFInt is the largest Integer of RFC 9651 structured fields.
	maxSFInt = 999_999_999_999_999
)

// fieldSet says which families appendFields writes.
type fieldSet struct {
	legacy, draft, retry, source, unixReset bool
}

func fieldSetOf(h httplimit.Headers) fieldSet {
	return fieldSet{
		legacy:    !h.DisableXRateLimit,
		draft:     !h.DisableRateLimit,
		retry:     !h.DisableRetryAfter,
		source:    h.Source,
		unixReset: h.UnixReset,
	}
}

// maxDescs bounds the limit sets one descCache keeps.
const maxDescs = 4096

// A descCache keeps the RateLimit-Policy line and item names of each limit
// set: a LimitSet is immutable and lives as long as its limiter. Owners
// start a new cache when their limiters are replaced, so reloads do not
// grow it; past maxDescs, sets are described afresh.
type descCache struct {
	m sync.Map // *floodgate.LimitSet → *setDesc
	n atomic.Int64
}

// setDesc describes one limit set in header syntax, as httplimit does: one
// item per limit, named after the policy, "name/i" when it has several.
type setDesc struct {
	line string
	ids  []string
}

func (c *descCache) describe(set *floodgate.LimitSet) *setDesc {
	if v, ok := c.m.Load(set); ok {
		return v.(*setDesc)
	}
	name := policyName(set.Policy())
	n := set.Len()
	d := &setDesc{ids: make([]string, n)}
	var line []byte
	for i := range n {
		l := set.Limit(i)
		id := name
		if n > 1 {
			id = name + "/" + strconv.Itoa(i+1)
		}
		d.ids[i] = string(appendSFString(nil, id))
		if i > 0 {
			line = append(line, ", "...)
		}
		q, w := quota(l)
		line = append(line, d.ids[i]...)
		line = append(line, ";q="...)
		line = strconv.AppendInt(line, q, 10)
		line = append(line, ";w="...)
		line = strconv.AppendInt(line, w, 10)
		if l.Interval() > 0 && l.Capacity() != l.Rate {
			line = append(line, ";floodgate-burst="...)
			line = strconv.AppendInt(line, min(l.Capacity(), maxSFInt), 10)
		}
	}
	d.line = string(line)
	if c.n.Add(1) > maxDescs {
		return d
	}
	v, _ := c.m.LoadOrStore(set, d)
	return v.(*setDesc)
}

// appendFields appends the fields of a decision: res is the driving Result,
// checks the checks decided (undecided ones carry a zero Result and are
// left out).
func (c *descCache) appendFields(dst []field, fs fieldSet, res *floodgate.Result, checks []floodgate.Check) []field {
	if res.Source == floodgate.SourceFailOpen || res.Source == floodgate.SourceFailClosed || res.Set == nil {
		// No state was read: there is no quota to describe.
		if fs.source && res.Source != "" {
			dst = append(dst, field{hdrSource, string(res.Source)})
		}
		return dst
	}
	never := res.RetryAfter == floodgate.RetryNever
	retrySecs := int64(0)
	if !res.Allowed && !never {
		retrySecs = max(ceilSeconds(res.RetryAfter), 1)
	}
	if fs.legacy {
		reset := ceilSeconds(res.ResetAfter)
		if fs.unixReset {
			reset = ceilSeconds(time.Duration(time.Now().UnixNano()) + res.ResetAfter)
		}
		dst = append(dst,
			field{hdrLimit, strconv.FormatInt(min(res.Limit.Capacity(), maxSFInt), 10)},
			field{hdrRemaining, strconv.FormatInt(min(res.Remaining, maxSFInt), 10)},
			field{hdrReset, strconv.FormatInt(reset, 10)})
	}
	if fs.draft {
		var b []byte
		n := 0
		for i := range checks {
			r := &checks[i].Result
			if r.Set == nil || r.Source == floodgate.SourceFailOpen {
				continue
			}
			d := c.describe(r.Set)
			dup := false
			for j := range i {
				if checks[j].Result.Set == r.Set {
					dup = true
				}
			}
			if dup {
				continue
			}
			dst = append(dst, field{hdrPolicy, d.line})
			if n > 0 {
				b = append(b, ", "...)
			}
			n++
			rs := int64(0)
			if r.Policy == res.Policy && r.Set == res.Set && r.Index == res.Index {
				rs = retrySecs
			}
			b = appendRateLimit(b, r, d.ids[r.Index], rs)
		}
		if n == 0 {
			b = appendRateLimit(b, res, string(appendSFString(nil, policyName(res.Policy))), retrySecs)
		}
		dst = append(dst, field{hdrRateLimit, string(b)})
	}
	if fs.retry && retrySecs > 0 {
		dst = append(dst, field{hdrRetryAfter, strconv.FormatInt(retrySecs, 10)})
	}
	if fs.source {
		dst = append(dst, field{hdrSource, string(res.Source)})
	}
	return dst
}

// setFields writes fields into h; RateLimit-Policy may repeat, one line per
// limit set.
func setFields(h http.Header, fields []field) {
	for _, f := range fields {
		if f.name == hdrPolicy {
			h[f.name] = append(h[f.name], f.value)
			continue
		}
		h[f.name] = []string{f.value}
	}
}

// appendRateLimit appends one RateLimit item: r for remaining units and t
// the seconds until the limit is full again, or, on a denial, the
// Retry-After value, which the draft forbids to point before t.
func appendRateLimit(b []byte, res *floodgate.Result, id string, retrySecs int64) []byte {
	b = append(b, id...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, min(res.Remaining, maxSFInt), 10)
	switch {
	case res.Allowed:
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(ceilSeconds(res.ResetAfter), maxSFInt), 10)
	case retrySecs > 0:
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(retrySecs, maxSFInt), 10)
	}
	return b
}

// quota expresses l as q units per w whole seconds, rounding w up and q
// down, so the advertised quota never exceeds the real one.
func quota(l floodgate.Limit) (q, w int64) {
	if l.Period <= 0 || l.Rate <= 0 {
		return 0, 1
	}
	w = ceilSeconds(l.Period)
	hi, lo := bits.Mul64(uint64(l.Rate), uint64(w)*uint64(time.Second))
	if hi >= uint64(l.Period) {
		return maxSFInt, w
	}
	qq, _ := bits.Div64(hi, lo, uint64(l.Period))
	return int64(min(qq, maxSFInt)), w
}

func policyName(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// appendSFString appends s as an RFC 9651 String; bytes it cannot carry
// become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
