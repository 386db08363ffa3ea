package httplimit

import (
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/statuswriter"
)

// Header names in canonical form, so that they are assigned to the header map
// without being canonicalised on every request.
const (
	headerLimit      = "X-Ratelimit-Limit"
	headerRemaining  = "X-Ratelimit-Remaining"
	headerReset      = "X-Ratelimit-Reset"
	headerSource     = "X-Ratelimit-Source"
	headerRetryAfter = "Retry-After"
	headerRateLimit  = "Ratelimit"
	headerPolicy     = "Ratelimit-Policy"
	headerType       = "Content-Type"
)

const (
	// maxDescs bounds the limit sets a Middleware describes and caches.
	maxDescs = 4096
	// maxSFInt is the largest Integer of RFC 9651 structured fields.
	maxSFInt = 999_999_999_999_999
)

// A desc describes one limit set in header syntax. It is computed once per
// set and reused for every response.
type desc struct {
	set    *floodgate.LimitSet
	policy string   // the RateLimit-Policy line
	ids    []string // per limit: its quoted identifier, e.g. "api" or "api/2"
	json   []string // per limit: the identifier as a JSON string
	caps   []string // per limit: its capacity, the X-RateLimit-Limit value
}

// newDesc describes set: one Quota Policy Item per limit, named after the
// policy, with the limit's number after a slash when the policy has several.
func newDesc(set *floodgate.LimitSet) *desc {
	name := policyName(set.Policy())
	n := set.Len()
	d := &desc{set: set, ids: make([]string, n), json: make([]string, n), caps: make([]string, n)}
	var line []byte
	for i := range n {
		l := set.Limit(i)
		id := name
		if n > 1 {
			id = name + "/" + strconv.Itoa(i+1)
		}
		d.ids[i] = string(appendSFString(nil, id))
		d.json[i] = string(appendJSONString(nil, id))
		d.caps[i] = strconv.FormatInt(min(l.Capacity(), maxSFInt), 10)
		if i > 0 {
			line = append(line, ", "...)
		}
		q, w := policyQuota(l)
		line = append(line, d.ids[i]...)
		line = append(line, ";q="...)
		line = strconv.AppendInt(line, q, 10)
		line = append(line, ";w="...)
		line = strconv.AppendInt(line, w, 10)
	}
	d.policy = string(line)
	return d
}

// policyQuota is l's quota as RateLimit-Policy advertises it, in the terms
// X-RateLimit-Limit and the remaining counts use: a token bucket whose burst
// differs from its rate (10/min, burst 5) is q = its burst per w = the time
// it takes to fill up again (5 per 30 s), so that q is the most a client
// can hold, as X-RateLimit-Limit says, and q/w its sustained rate; any
// other limit is Quota's rate per period.
func policyQuota(l floodgate.Limit) (q, w int64) {
	iv, capacity := l.Interval(), l.Capacity()
	if iv <= 0 || capacity == l.Rate || capacity <= 0 {
		return Quota(l)
	}
	hi, lo := bits.Mul64(uint64(capacity), uint64(iv))
	if hi != 0 || lo > math.MaxInt64 {
		return min(capacity, maxSFInt), maxSFInt
	}
	return min(capacity, maxSFInt), min(ceilSeconds(time.Duration(lo)), maxSFInt)
}

// Quota expresses l as q units per w whole seconds, the only windows the
// RateLimit-Policy field can carry: w is the period rounded up to a second,
// and q the units l admits in w, rounded down, so the advertised quota never
// exceeds the real one.
func Quota(l floodgate.Limit) (q, w int64) {
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

// describe returns the description of set, the limit set a Result of the
// check in slot names, or nil when the Result named none (it failed open).
func (d *Evaluator) describe(slot int, set *floodgate.LimitSet) *desc {
	if set == nil || set.Len() == 0 {
		return nil
	}
	last := &d.last[slot]
	if ds := last.Load(); ds != nil && ds.set == set {
		return ds
	}
	var ds *desc
	if v, ok := d.descs.Load(set); ok {
		ds = v.(*desc)
	} else {
		ds = newDesc(set)
		// A limiter that made a new set per call would otherwise grow the
		// cache without bound; past the bound, sets are described afresh.
		if d.ndescs.Add(1) <= maxDescs {
			if v, loaded := d.descs.LoadOrStore(set, ds); loaded {
				ds = v.(*desc)
			}
		}
	}
	last.Store(ds)
	return ds
}

// A verdict is the decision for a request and what the headers say about
// it. Every number comes from res, the Result of the check that drove the
// decision, so the headers describe one limit.
type verdict struct {
	res   floodgate.Result
	drive int   // index in checks of the check whose Result drives the headers
	d     *desc // description of res.Set, or nil
}

// valBlock holds a response's header values: the slice every field's value
// is a part of, and the bytes of the numbers they are made of. One
// allocation carries both, sized for the usual response (one limit set, all
// header families) so that it stays small; a response with more fields or
// longer numbers takes two allocations instead.
type valBlock struct {
	vals [7]string
	buf  [48]byte
}

// numBuf is the stack buffer the numbers of one response are written to.
const numBuf = 160

// block is what a request under a count rule allocates for its writer and
// its header values, in one allocation.
type block struct {
	sw statuswriter.Writer
	valBlock
}

// maxFields bounds the header fields of one response: a RateLimit-Policy
// line per rule and seven others.
const maxFields = MaxRules + 7

// fields is the list of header fields of a response, in order; the values
// of one name are adjacent.
type fields struct {
	name     [maxFields]string
	val      [maxFields]string
	n        int
	noPolicy bool // RateLimit is sent without RateLimit-Policy
}

func (f *fields) add(name, val string) {
	f.name[f.n], f.val[f.n] = name, val
	f.n++
}

// fields lists the rate-limit header fields of a decided response, and with
// contentType the Content-Type of the default 429 body. The numbers are
// written to buf and all values share one string made of them: a copy, or,
// when they fit, the bytes of a valBlock that lives as long as the values
// and is never written again: vb, or with alloc a new one. It returns the
// block the string lives in, or nil.
func (v *Answer) fields(f *fields, contentType bool, buf []byte, vb *valBlock, alloc bool) *valBlock {
	d := v.d
	cs := &v.cs
	hd := &d.hdr
	res := &v.v.res
	never := res.RetryAfter == floodgate.RetryNever
	legacy := !hd.DisableXRateLimit
	draft := !hd.DisableRateLimit
	retry := !res.Allowed && !hd.DisableRetryAfter && !never
	body := contentType && !res.Allowed && d.body != BodyNone

	// RateLimit-Policy lists the limits of every check decided, in the
	// order of the rules; RateLimit gives each its own driving limit's
	// numbers. The X-RateLimit fields describe the check that drove.
	var lines [MaxRules]string
	var descs [MaxRules]*desc
	var checkOf [MaxRules]int
	nl := 0
	if draft {
		for i := range cs.n {
			ds := v.v.d
			if i != v.v.drive {
				ds = d.describe(int(cs.slot[i]), cs.c[i].Result.Set)
			}
			if ds == nil || slices.Contains(lines[:nl], ds.policy) {
				continue
			}
			lines[nl], descs[nl], checkOf[nl] = ds.policy, ds, i
			nl++
		}
	}

	// Numbers go into one buffer that becomes one string; off records where
	// each value ends.
	b := buf[:0]
	var off [4]int
	limit := ""
	if legacy {
		if v.v.d != nil {
			limit = v.v.d.caps[res.Index]
		} else {
			b = strconv.AppendInt(b, min(res.Limit.Capacity(), maxSFInt), 10)
		}
		off[0] = len(b)
		b = strconv.AppendInt(b, min(res.Remaining, maxSFInt), 10)
		off[1] = len(b)
		if hd.UnixReset {
			b = strconv.AppendInt(b, ceilUnixSeconds(d.clock.UnixNano(), res.ResetAfter), 10)
		} else {
			b = strconv.AppendInt(b, ceilSeconds(res.ResetAfter), 10)
		}
		off[2] = len(b)
	}
	retrySecs := int64(0)
	if !res.Allowed && !never {
		// Rounded up, and at least 1: a client that waits this long finds
		// the request passes, never a moment early.
		retrySecs = RetryAfterSeconds(res.RetryAfter)
	}
	if draft {
		if nl == 0 {
			b = appendRateLimit(b, res, nil, retrySecs)
		}
		for k := range nl {
			if k > 0 {
				b = append(b, ", "...)
			}
			if i := checkOf[k]; i == v.v.drive {
				b = appendRateLimit(b, res, descs[k], retrySecs)
			} else {
				b = appendRateLimit(b, &cs.c[i].Result, descs[k], 0)
			}
		}
		off[3] = len(b)
	}
	if retry {
		b = strconv.AppendInt(b, retrySecs, 10)
	}
	nf := 0 // the fields added below
	if legacy {
		nf += 3
	}
	if draft {
		nf += 1 + nl
	}
	for _, on := range [...]bool{retry, hd.Source, body} {
		if on {
			nf++
		}
	}
	var s string
	if len(b) <= len(valBlock{}.buf) && (vb != nil || alloc && nf <= len(valBlock{}.vals)) {
		if vb == nil {
			vb = new(valBlock)
		}
		n := copy(vb.buf[:], b)
		s = unsafe.String(&vb.buf[0], n)
	} else {
		s = string(b)
		vb = nil
	}

	start := 0
	if legacy {
		if limit == "" {
			limit = s[:off[0]]
		}
		f.add(headerLimit, limit)
		f.add(headerRemaining, s[off[0]:off[1]])
		f.add(headerReset, s[off[1]:off[2]])
		start = off[2]
	}
	if draft {
		f.add(headerRateLimit, s[start:off[3]])
		start = off[3]
		for _, l := range lines[:nl] {
			f.add(headerPolicy, l)
		}
		f.noPolicy = nl == 0
	}
	if retry {
		f.add(headerRetryAfter, s[start:])
	}
	if hd.Source {
		f.add(headerSource, string(res.Source))
	}
	if body {
		if d.body == BodyJSON {
			f.add(headerType, "application/json")
		} else {
			f.add(headerType, "application/problem+json")
		}
	}
	return vb
}

// writeHeaders sets the rate-limit header fields of a decided response, and
// with contentType the Content-Type of the default 429 body. When
// withWriter is set it returns a statuswriter.Writer allocated together with the
// header values.
//
// The values share one backing array and one string of their numbers (see
// fields), both in one valBlock, so a usual response costs one allocation;
// under a count rule the writer shares it too. Each value slice is capped
// at its own length, so a handler that adds to one of the fields appends to
// a copy rather than overwriting its neighbour.
func (v *Answer) writeHeaders(w http.ResponseWriter, withWriter, contentType bool) *statuswriter.Writer {
	if hd := &v.d.hdr; !withWriter && v.v.res.Allowed && hd.DisableXRateLimit && hd.DisableRateLimit && !hd.Source {
		return nil // no field to write: skip building the list
	}
	var vb *valBlock
	var sw *statuswriter.Writer
	var blk *block
	if withWriter {
		blk = new(block)
		sw, vb = &blk.sw, &blk.valBlock
	}
	var f fields
	var buf [numBuf]byte
	vb = v.fields(&f, contentType, buf[:], vb, true)
	nv := f.n
	if nv == 0 {
		return sw
	}
	if vb == nil && blk != nil {
		vb = &blk.valBlock // the numbers did not fit, the values may
	}
	var vals []string
	if vb != nil && nv <= len(vb.vals) {
		vals = vb.vals[:nv]
	} else {
		vals = make([]string, nv)
	}
	copy(vals, f.val[:nv])
	h := w.Header()
	for i := 0; i < nv; {
		j := i + 1
		for j < nv && f.name[j] == f.name[i] {
			j++
		}
		h[f.name[i]] = vals[i:j:j]
		i = j
	}
	if f.noPolicy {
		delete(h, headerPolicy)
	}
	return sw
}

// appendRateLimit appends one item of the RateLimit field: the service
// limit of res's driving limit, named as d names it (d may be nil). Its t
// parameter is the seconds until that limit is full again
// (Result.ResetAfter), or, on a denial, the Retry-After value, since
// Retry-After must not point before t; a request that can never pass has no
// t.
func appendRateLimit(b []byte, res *floodgate.Result, d *desc, retrySecs int64) []byte {
	if d != nil {
		b = append(b, d.ids[res.Index]...)
	} else {
		b = appendSFString(b, policyName(res.Policy))
	}
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

func policyName(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// RetryAfterSeconds is the Retry-After value, in whole seconds, of a wait
// of d > 0: d rounded up, and at least 1, so that a client that waits this
// long finds the request passes, never a moment early. Every Retry-After
// floodgate writes (httplimit, checkapi, the proxy) is this; the caller
// leaves the field out for a request that can never pass
// (floodgate.RetryNever).
func RetryAfterSeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

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

// ceilUnixSeconds is the Unix second at or after now+d.
func ceilUnixSeconds(now int64, d time.Duration) int64 {
	t := now
	switch {
	case d <= 0:
	case t > math.MaxInt64-int64(d):
		t = math.MaxInt64
	default:
		t += int64(d)
	}
	s := t / int64(time.Second)
	if t%int64(time.Second) > 0 {
		s++
	}
	return s
}

// appendSFString appends s as an RFC 9651 String: printable ASCII in double
// quotes, with quote and backslash escaped. Other bytes cannot be carried
// and become '?'.
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

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// The default 429 bodies are built in pooled buffers: under a flood of
// denied requests this path must stay as cheap as the allowed one.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const (
	problemPrefix = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":`
	detailNever = `"The request costs more than the limit admits at once; it can never pass."`
)

// writeLimited writes the default 429 response: status and the body of
// Config.Body. The Content-Type was set with the other headers.
func (v *Answer) writeLimited(w http.ResponseWriter) {
	if v.d.body == BodyNone {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	bp := bodyPool.Get().(*[]byte)
	b := v.appendLimited((*bp)[:0])
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(b)
	if cap(b) <= 4096 {
		*bp = b
		bodyPool.Put(bp)
	}
}

// appendLimited appends the default 429 body to b.
func (v *Answer) appendLimited(b []byte) []byte {
	res := &v.v.res
	never := res.RetryAfter == floodgate.RetryNever
	secs := int64(0)
	if !never {
		secs = RetryAfterSeconds(res.RetryAfter)
	}
	switch v.d.body {
	case BodyJSON:
		b = append(b, `{"error":"rate limit exceeded"`...)
		if !never {
			b = append(b, `,"retry_after":`...)
			b = strconv.AppendInt(b, secs, 10)
		}
		b = append(b, "}\n"...)
	case BodyProblem:
		b = append(b, problemPrefix...)
		if never {
			b = append(b, detailNever...)
		} else {
			b = append(b, `"Too many requests; retry in `...)
			b = strconv.AppendInt(b, secs, 10)
			if secs == 1 {
				b = append(b, ` second."`...)
			} else {
				b = append(b, ` seconds."`...)
			}
			b = append(b, `,"retry-after":`...)
			b = strconv.AppendInt(b, secs, 10)
		}
		b = append(b, `,"violated-policies":[`...)
		if v.v.d != nil {
			b = append(b, v.v.d.json[res.Index]...)
		} else {
			b = appendJSONString(b, policyName(res.Policy))
		}
		b = append(b, "]}\n"...)
	}
	return b
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
