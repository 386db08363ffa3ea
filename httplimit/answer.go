package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/internal/settle"
	"github.com/floodgate-go/floodgate/tokencost"
)

// EvaluatorConfig configures an Evaluator: how its verdicts are written. The
// fields mean what the fields of the same names in Config mean, and so do
// their zero values.
type EvaluatorConfig struct {
	// Headers selects the rate-limit fields; the zero value sends them all.
	Headers Headers
	// Body selects the body of refusals; the zero value is BodyProblem.
	Body Body
	// Logger receives limiter errors; nil means slog.Default().
	Logger *slog.Logger
	// Clock tells the time for Headers.UnixReset; nil means
	// clock.System.
	Clock clock.Clock
	// LogKeys logs keys as they are; false logs redacted stand-ins.
	LogKeys bool
}

// An Evaluator is the part of a Middleware that does not depend on net/http:
// it evaluates a request's charges and turns the answer into header fields,
// a status and a body. Front ends that have no *http.Request (Fiber's
// fasthttp, gRPC) build a Charge per limit of a request themselves and write
// the Answer in their own protocol, so every front end sends the same
// fields, the same 429 body, and keeps the same counting rules. An Evaluator
// is safe for concurrent use.
type Evaluator struct {
	hdr     Headers
	body    Body
	log     *slog.Logger
	clock   clock.Clock
	logKeys bool

	descs  sync.Map // *floodgate.LimitSet → *desc
	ndescs atomic.Int64
	// last holds per slot (a Middleware's rule, a front end's charge
	// position) the description of the set last decided there: a slot
	// nearly always decides under the same set.
	last [MaxRules]atomic.Pointer[desc]

	lastLog    atomic.Int64
	suppressed atomic.Uint64
	lastNoKey  atomic.Int64
}

// NewEvaluator validates cfg and returns its Evaluator. Errors wrap
// ErrInvalidConfig.
func NewEvaluator(cfg EvaluatorConfig) (*Evaluator, error) {
	d := new(Evaluator)
	if errs := d.init(cfg); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

func (d *Evaluator) init(cfg EvaluatorConfig) []error {
	if cfg.Body > BodyNone {
		return []error{fmt.Errorf("%w: unknown Body %d", ErrInvalidConfig, cfg.Body)}
	}
	d.hdr, d.body, d.log, d.clock, d.logKeys = cfg.Headers, cfg.Body, cfg.Logger, cfg.Clock, cfg.LogKeys
	if d.log == nil {
		d.log = slog.Default()
	}
	if d.clock == nil {
		d.clock = clock.System
	}
	return nil
}

// A Charge is one limit a request is checked against: what a Rule amounts
// to once its functions have run on the request.
type Charge struct {
	// Limiter decides the charge. It must be set.
	Limiter floodgate.Limiter
	// Key is the key charged; "" is a valid key, shared by every request
	// that gets it.
	Key string
	// Cost is the units the request costs; 0 lets it pass without
	// charging it (a plain look). A negative cost makes the Answer reply
	// 500 (see Rule.Cost).
	Cost int64
	// Peek makes the charge ask, charging nothing, whether Cost units
	// would pass now (floodgate.PeekN): a peek at whether the next request
	// would pass is Cost 1 with Peek. A Cost of 0 is a look with or
	// without it, as no units always pass. False charges.
	Peek bool
	// Count and ResponseCost mean what Rule's fields of the same names
	// mean, zero values included (all responses count; the cost stands);
	// they take effect in Answer.Settle.
	Count        Count
	ResponseCost func(status int, h http.Header) int64
}

// Evaluate checks the request that charges describe and fills v with the
// decision. With no charges the request is served without headers. More
// than MaxRules charges is an error of the front end, reported through
// v.Err. v may be a zero Answer or one used before. ctx is the request's
// context; refunds made by Settle outlive its cancellation.
func (d *Evaluator) Evaluate(ctx context.Context, v *Answer, charges ...Charge) {
	v.begin(d, ctx)
	if len(charges) > MaxRules {
		v.err = fmt.Errorf("%w: %d charges, more than the %d one decision checks", ErrInvalidConfig, len(charges), MaxRules)
		v.out = outError
		d.logError(ctx, v.err, "")
		return
	}
	for i := range charges {
		c := &charges[i]
		if c.Cost < 0 {
			v.refuseCost(c.Limiter, c.Cost)
			return
		}
		v.add(i, c.Limiter, c.Key, c.Cost, c.Peek, c.Count, c.ResponseCost)
	}
	d.decide(v)
}

// checks is what one request is checked against: the floodgate checks, the
// slot of each (for the description cache) and their counting rules.
type checks struct {
	c        [MaxRules]floodgate.Check
	slot     [MaxRules]uint8
	count    [MaxRules]Count
	respCost [MaxRules]func(int, http.Header) int64
	tally    [MaxRules]*tokencost.Tally
	tokens   [MaxRules]tokencost.Count
	n        int
}

// outcome is what an Answer tells its front end to do.
type outcome uint8

const (
	outNone        outcome = iota // nothing checked: serve, no headers
	outDecided                    // allowed or limited, with headers
	outError                      // the limiter could not decide
	outInvalidCost                // a charge had a negative cost: 500
	outFailOpen                   // the engine failed open: serve
	outFailClosed                 // the engine failed closed: 503
	outRefused                    // the limiter could not decide, and the request is refused: 503
)

// Sources of the Results that stand for refusals no limit made: what
// Answer.Result and Config.OnLimited see when the limiter could not
// decide, or a cost was invalid. The engines' own fail-closed denials keep
// floodgate.SourceFailClosed.
const (
	// SourceError marks a request refused because its limiter could not
	// decide (an engine error no failure mode absorbed): answered 503.
	SourceError floodgate.Source = "error"

	// SourceInvalidCost marks a request refused because a Rule's Cost
	// returned a negative cost, a bug of the server: answered 500.
	SourceInvalidCost floodgate.Source = "invalid-cost"
)

// Status returns the status of the response to a request refused with
// res: 503 Service Unavailable when the limiter failed closed or could not
// decide (Source floodgate.SourceFailClosed or SourceError), 500 for
// SourceInvalidCost, and 429 Too Many Requests for a limit's denial. A
// Config.OnLimited that writes its own body answers with it, so that every
// refusal keeps its meaning.
func Status(res floodgate.Result) int {
	switch res.Source {
	case floodgate.SourceFailClosed, SourceError:
		return http.StatusServiceUnavailable
	case SourceInvalidCost:
		return http.StatusInternalServerError
	}
	return http.StatusTooManyRequests
}

// An Answer is the decision for one request and everything a front end
// writes about it: Status, Headers, ContentType and AppendBody, then, for a
// request that is served, Settle with its response. It is filled by
// Middleware.Evaluate or Evaluator.Evaluate. An Answer is large and meant to live
// on the stack of one request's handling; it is not safe for concurrent
// use.
type Answer struct {
	d        *Evaluator
	ctx      context.Context
	cs       checks
	v        verdict
	err      error
	out      outcome
	counting bool
}

func (v *Answer) begin(d *Evaluator, ctx context.Context) {
	v.d, v.ctx, v.cs.n, v.err, v.out, v.counting = d, ctx, 0, nil, outNone, false
}

func (v *Answer) add(slot int, lim floodgate.Limiter, key string, cost int64, peek bool, count Count, rc func(int, http.Header) int64) {
	n := v.cs.n
	// Field by field: the check's Result is written by the decision, and
	// copying a whole Check here would write it twice.
	c := &v.cs.c[n]
	// A cost of 0 passes without charging: a look (floodgate's Check would
	// charge 1 for a Cost of 0).
	c.Limiter, c.Key, c.Cost, c.Peek, c.Look = lim, key, cost, peek, cost == 0
	v.cs.slot[n], v.cs.count[n], v.cs.respCost[n], v.cs.tally[n] = uint8(slot), count, rc, nil
	v.cs.n++
	v.counting = v.counting || count != CountAll || rc != nil
}

// addTokens makes the check added last a token rule's: settled with t's
// cost of c.
func (v *Answer) addTokens(t *tokencost.Tally, c tokencost.Count) {
	n := v.cs.n - 1
	v.cs.tally[n], v.cs.tokens[n] = t, c
	v.counting = true
}

// tallies are the token tallies of one request, one per tokencost.Source.
type tallies struct {
	src [MaxRules]*tokencost.Source
	t   [MaxRules]*tokencost.Tally
	n   int
}

// of returns the tally of r under s, begun (reading r's body) the first
// time it is asked for.
func (ts *tallies) of(s *tokencost.Source, r *http.Request) *tokencost.Tally {
	for i := range ts.n {
		if ts.src[i] == s {
			return ts.t[i]
		}
	}
	t := s.Begin(r)
	if ts.n < MaxRules {
		ts.src[ts.n], ts.t[ts.n] = s, t
		ts.n++
	}
	return t
}

// tokenTap hands a response body to the distinct tallies of a request.
type tokenTap struct {
	t [MaxRules]*tokencost.Tally
	n int
}

func (tt *tokenTap) observe(h http.Header, p []byte) {
	for _, t := range tt.t[:tt.n] {
		t.Observe(h, p)
	}
}

// tap returns what the handler's writer gives the response body to: nil
// without token rules.
func (v *Answer) tap() func(http.Header, []byte) {
	var tt *tokenTap
	for i := range v.cs.n {
		t := v.cs.tally[i]
		if t == nil {
			continue
		}
		if tt == nil {
			tt = new(tokenTap)
		}
		if !slices.Contains(tt.t[:tt.n], t) {
			tt.t[tt.n] = t
			tt.n++
		}
	}
	if tt == nil {
		return nil
	}
	return tt.observe
}

// Observe passes p, the next piece of the body of the response to a
// request v serves, to its token rules (Rule.Tokens), with the response's
// header h: for front ends that write the body themselves. The Handler
// does it for its handler.
func (v *Answer) Observe(h http.Header, p []byte) {
	for i := range v.cs.n {
		if t := v.cs.tally[i]; t != nil && !slices.Contains(v.cs.tally[:i], t) {
			t.Observe(h, p)
		}
	}
}

// refuseCost makes v answer 500 for a negative cost: the server's own code
// is wrong, and a bug must not switch limiting off.
func (v *Answer) refuseCost(lim floodgate.Limiter, cost int64) {
	v.out = outInvalidCost
	v.v.res = floodgate.Result{Source: SourceInvalidCost, Policy: lim.Name(), RetryAfter: floodgate.RetryNever}
	v.d.logError(v.ctx, fmt.Errorf("%w: policy %s: the rule's Cost returned %d; costs are 0 (peek) or more", floodgate.ErrInvalidCost, lim.Name(), cost), "")
}

// FromChecks fills v with checks that a front end decided itself (each
// check's Result set, at most MaxRules of them; more are ignored), drive
// being the index of the one whose Result drives the answer, so that v
// describes them as Evaluate would have (Headers, Result, ResultOf).
func (d *Evaluator) FromChecks(ctx context.Context, v *Answer, drive int, checks ...floodgate.Check) {
	v.begin(d, ctx)
	checks = checks[:min(len(checks), MaxRules)]
	if len(checks) == 0 || drive < 0 || drive >= len(checks) {
		return
	}
	for i := range checks {
		c := &checks[i]
		v.add(i, c.Limiter, c.Key, c.Cost, c.Peek, CountAll, nil)
		v.cs.c[i].Result = c.Result
	}
	v.v.res, v.v.drive = checks[drive].Result, drive
	d.conclude(v)
}

// decide decides v's checks.
func (d *Evaluator) decide(v *Answer) {
	cs := &v.cs
	if cs.n == 0 {
		return
	}
	if err := v.ctx.Err(); err != nil {
		// The client went away (an HTTP/2 stream reset, a closed
		// connection) before its request was decided: nothing is asked
		// of the limiters, so nothing is charged and no decision is
		// counted, and it is no failure of theirs. Config.OnError gets the
		// context's error.
		v.err, v.out = err, outError
		v.v.res = floodgate.Result{Source: SourceError, Policy: cs.c[0].Limiter.Name()}
		return
	}
	var err error
	if cs.n == 1 {
		// One check: its Result is the verdict's (ResultOf reads it there).
		v.v.drive = 0
		v.v.res, err = cs.c[0].Run(v.ctx)
	} else {
		v.v.res, v.v.drive, err = floodgate.AllowAll(v.ctx, cs.c[:cs.n]...)
	}
	if err != nil {
		v.err, v.out = err, outError
		v.v.res = floodgate.Result{Source: SourceError, Policy: cs.c[0].Limiter.Name()}
		if v.ctx.Err() == nil {
			// An engine that gave up because the client did says
			// nothing about the engine.
			d.logError(v.ctx, err, cs.c[0].Key)
		}
		return
	}
	d.conclude(v)
}

// conclude sets v's outcome from its driving Result.
func (d *Evaluator) conclude(v *Answer) {
	cs := &v.cs
	switch v.v.res.Source {
	case floodgate.SourceFailOpen:
		// The engine failed and its failure policy let the request through.
		// No state was read, so there is no quota to advertise, and nothing
		// was charged that a count rule could refund.
		v.out = outFailOpen
		return
	case floodgate.SourceFailClosed:
		if !v.v.res.Allowed {
			// The limiter, not the client, failed: 503, not 429.
			v.out = outFailClosed
			return
		}
	}
	v.out = outDecided
	v.v.d = d.describe(int(cs.slot[v.v.drive]), v.v.res.Set)
}

// Err returns the error of a limiter that could not decide (see
// Config.OnError), or nil. The front end chooses whether to serve such a
// request; the error has been logged. To refuse it with the response the
// middleware writes for refusals (503, Config.Body's format), call Refuse.
func (v *Answer) Err() error { return v.err }

// Refuse turns a verdict whose limiter could not decide (Err is not nil)
// into a refusal: Status becomes 503, and ContentType and AppendBody
// describe its body. It does nothing to other verdicts.
func (v *Answer) Refuse() {
	if v.out == outError {
		v.out = outRefused
	}
}

// Status returns the status a front end answers with instead of serving
// the request: 429 when a limit denied it, 503 when the engine failed
// closed, 500 when a cost was negative. It is 0 when the request is to be
// served, and when Err is not nil.
func (v *Answer) Status() int {
	switch v.out {
	case outDecided:
		if !v.v.res.Allowed {
			return http.StatusTooManyRequests
		}
	case outInvalidCost:
		return http.StatusInternalServerError
	case outFailClosed, outRefused:
		return http.StatusServiceUnavailable
	}
	return 0
}

// Result returns the Result that drove the decision: the denial, or the
// admission with the fewest units left. A limiter that could not decide
// has a Result of Source SourceError, an invalid cost one of Source
// SourceInvalidCost (see Status). It is the zero Result when nothing was
// checked.
func (v *Answer) Result() floodgate.Result {
	if v.out == outNone {
		return floodgate.Result{}
	}
	return v.v.res
}

// Drive returns the index, among the charges given to Evaluate, of the one
// whose Result drove the decision (see floodgate.AllowAll).
func (v *Answer) Drive() int { return v.v.drive }

// ResultOf returns charge i's own Result: what its limiter answered, as
// decided (before the refunds of a later denial), or the zero Result for a
// charge after a denial, which was not decided.
func (v *Answer) ResultOf(i int) floodgate.Result {
	if v.cs.n == 1 && i == 0 {
		return v.v.res
	}
	return v.cs.c[i].Result
}

// Counts reports whether the verdict waits for the response: a request
// that is served must then be settled (Settle or Serve), or the refunds of
// its count rules are lost.
func (v *Answer) Counts() bool {
	return v.counting && v.out == outDecided && v.v.res.Allowed
}

// Headers calls set with every rate-limit header field of the response in
// their canonical form, as the middleware sends them; a name that has
// several values (RateLimit-Policy) is passed once per value. It leaves out
// Content-Type (see ContentType).
func (v *Answer) Headers(set func(name, value string)) {
	switch v.out {
	case outDecided:
		var f fields
		var buf [numBuf]byte
		v.fields(&f, false, buf[:], nil, false)
		for i := range f.n {
			set(f.name[i], f.val[i])
		}
	case outFailOpen, outFailClosed, outRefused:
		if v.d.hdr.Source {
			set(headerSource, string(v.v.res.Source))
		}
		if retry := v.v.res.RetryAfter; v.out == outFailClosed && !v.d.hdr.DisableRetryAfter && retry > 0 && retry != floodgate.RetryNever {
			set(headerRetryAfter, itoa(RetryAfterSeconds(retry)))
		}
	}
}

// ContentType returns the media type of the body AppendBody writes, or ""
// when there is none: every refusal's body has the format Config.Body
// selects.
func (v *Answer) ContentType() string {
	if v.Status() == 0 {
		return ""
	}
	switch v.d.body {
	case BodyJSON:
		return "application/json"
	case BodyProblem:
		return "application/problem+json"
	}
	return ""
}

// AppendBody appends the body of the Status response to b, in the format
// Config.Body selects: the 429 of a limit, the 503 of a limiter that
// failed closed or could not decide, the 500 of an invalid cost. A request
// that is served has no body of the limiter's.
func (v *Answer) AppendBody(b []byte) []byte {
	switch status := v.Status(); status {
	case http.StatusTooManyRequests:
		return v.appendLimited(b)
	case http.StatusServiceUnavailable, http.StatusInternalServerError:
		return v.appendRefused(b, status)
	}
	return b
}

// appendRefused appends the body of a refusal no limit made: 503 or 500.
func (v *Answer) appendRefused(b []byte, status int) []byte {
	retry := int64(0)
	if r := v.v.res.RetryAfter; status == http.StatusServiceUnavailable && r > 0 && r != floodgate.RetryNever {
		retry = RetryAfterSeconds(r)
	}
	switch v.d.body {
	case BodyJSON:
		if status == http.StatusInternalServerError {
			return append(b, `{"error":"rate limiter given an invalid request cost"}`+"\n"...)
		}
		b = append(b, `{"error":"rate limiter unavailable"`...)
		if retry > 0 {
			b = append(b, `,"retry_after":`...)
			b = strconv.AppendInt(b, retry, 10)
		}
		return append(b, "}\n"...)
	case BodyProblem:
		if status == http.StatusInternalServerError {
			return append(b, invalidCostBody...)
		}
		b = append(b, failClosedPrefix...)
		if retry > 0 {
			b = append(b, `,"retry-after":`...)
			b = strconv.AppendInt(b, retry, 10)
		}
		return append(b, "}\n"...)
	}
	return b
}

// Settle ends a served request's verdict once its response is known:
// status is the response's status (a handler that panicked or failed
// without a status counts as 500), h its header, trailers included, for
// Rule.ResponseCost (nil when the front end has none). The rules that do
// not count the response are refunded; those with a ResponseCost are
// charged or refunded the difference. Settle does nothing when Counts
// reports false.
func (v *Answer) Settle(status int, h http.Header) {
	if v.Counts() {
		v.settle(status, h)
	}
}

// Serve runs next, the rest of the request's handling, which returns the
// response's status, and settles v with it and h. A panic in next counts as
// a failed response (500): v is settled and the panic goes on.
func (v *Answer) Serve(next func() (status int), h http.Header) {
	if !v.Counts() {
		next()
		return
	}
	failed := true
	defer func() {
		if failed {
			v.settle(http.StatusInternalServerError, h)
		}
	}()
	status := next()
	failed = false
	v.settle(status, h)
}

// settle refunds the rules the response does not count for, and charges
// the rules with a ResponseCost what the response says it cost.
func (v *Answer) settle(status int, h http.Header) {
	failed := status >= 400
	cs := &v.cs
	ctx := v.ctx
	if ctx.Err() != nil {
		// The client is gone; the refund or charge is still owed.
		ctx = context.WithoutCancel(ctx)
	}
	for i := range cs.n {
		c := &cs.c[i]
		count := cs.count[i]
		counts := count == CountAll || (count == CountFailed) == failed
		var err error
		switch {
		case !counts:
			if c.Units() > 0 {
				err = c.Limiter.RefundN(ctx, c.Key, c.Units())
			}
		case cs.tally[i] != nil:
			err = settle.Charge(ctx, c, cs.tally[i].Cost(cs.tokens[i]))
		case cs.respCost[i] != nil:
			err = settle.Charge(ctx, c, cs.respCost[i](status, h))
		}
		if err != nil {
			v.d.logError(ctx, err, c.Key)
		}
	}
}

// writeSource sets the fields of a fail-open admission: X-RateLimit-Source
// when Headers.Source asks for it, since an operator looking at the answer
// should see why it has no quota.
func (v *Answer) writeSource(w http.ResponseWriter) {
	if v.d.hdr.Source {
		w.Header()[headerSource] = []string{string(v.v.res.Source)}
	}
}

const (
	invalidCostBody = `{"type":"about:blank","title":"Internal Server Error","status":500,` +
		`"detail":"The rate limiter was given an invalid request cost."}` + "\n"
	failClosedPrefix = `{"type":"about:blank","title":"Service Unavailable","status":503,` +
		`"detail":"The rate limiter is unavailable; retry shortly."`
)

// logError logs a limiter error, at most once per second. The key is
// redacted unless the config says otherwise.
// logNoKey logs, at most once a second, that a rule let a request through
// because its key function found no key (Rule.SkipNoKey).
func (d *Evaluator) logNoKey(ctx context.Context, lim floodgate.Limiter) {
	now := time.Now().UnixNano()
	last := d.lastNoKey.Load()
	if now-last < int64(time.Second) || !d.lastNoKey.CompareAndSwap(last, now) {
		return
	}
	d.log.LogAttrs(ctx, slog.LevelInfo, "httplimit: a request had no key, and its rule skips such requests", slog.String("policy", lim.Name()))
}

func (d *Evaluator) logError(ctx context.Context, err error, key string) {
	now := time.Now().UnixNano()
	last := d.lastLog.Load()
	if now-last < int64(time.Second) || !d.lastLog.CompareAndSwap(last, now) {
		d.suppressed.Add(1)
		return
	}
	attrs := [3]slog.Attr{slog.Any("error", err), slog.Uint64("suppressed", d.suppressed.Swap(0))}
	n := 2
	if key != "" {
		if !d.logKeys {
			key = floodgate.RedactKey(key)
		}
		attrs[n] = slog.String("key", key)
		n++
	}
	d.log.LogAttrs(ctx, slog.LevelError, "httplimit: rate limiter failed", attrs[:n]...)
}
