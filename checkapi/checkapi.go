// Package checkapi is floodgate's HTTP decision API, POST /v1/check: a
// caller in any language names a policy, a key and a cost, and gets the
// decision as JSON with the middleware's rate-limit header fields.
package checkapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/denylog"
	"github.com/floodgate-go/floodgate/internal/textform"
	"github.com/floodgate-go/floodgate/internal/webguard"
)

// Defaults of Config's zero fields.
const (
	// DefaultTimeout bounds one check request. Keep the engine's own
	// timeout (failover.GuardOptions.Timeout) below it, so that a Redis
	// that hangs is answered by the failure policy, not by this deadline.
	DefaultTimeout = time.Second

	// DefaultMaxBody is the largest check request body read.
	DefaultMaxBody = 64 << 10

	// MaxChecks is the most checks one batch request may carry: as many as
	// one decision checks (httplimit.MaxRules). More is a 400, never a
	// partial decision.
	MaxChecks = httplimit.MaxRules
)

// Path is the path of the check API.
const Path = "/v1/check"

// Config configures the check API.
type Config struct {
	// Timeout bounds each request; 0 means DefaultTimeout. A request
	// still undecided then is answered 503.
	Timeout time.Duration

	// MaxBody bounds the request body in bytes; 0 means DefaultMaxBody.
	MaxBody int64

	// Headers selects the rate-limit header fields, as for the proxy:
	// DisableRetryAfter leaves Retry-After out of 429 and fail-closed 503
	// answers alike.
	Headers httplimit.Headers

	// Policies are the limiters by policy name. SetPolicies replaces them.
	Policies map[string]floodgate.Limiter

	// Logger receives denials (sampled) and errors. Nil means
	// slog.Default().
	Logger *slog.Logger

	// RawKeys writes keys as they are in the denial log lines; false, the
	// default, writes floodgate.RedactKey's stand-ins.
	RawKeys bool

	// Token, when set, must be sent as "Authorization: Bearer <token>";
	// other requests are answered 401 without a decision.
	Token string

	// AllowedHosts are the names, besides IP addresses and localhost, that
	// requests may give as their Host; any other is refused (403), so that
	// a web page whose name an attacker points at this address (DNS
	// rebinding) cannot spend anyone's budget.
	AllowedHosts []string

	// Concurrency are the concurrency limits clients hold leases of, by
	// name, with POST AcquirePath, RenewPath and ReleasePath (see
	// API.serveLease). SetConcurrency replaces them.
	Concurrency map[string]ConcurrencyLimit
}

// API is the HTTP decision API: POST /v1/check with
//
//	{"policy": "api", "key": "user:42", "cost": 1}
//
// or a batch, decided all or nothing (floodgate.AllowAll: a check denied
// anywhere charges nothing anywhere):
//
//	{"checks": [{"policy": "global", "key": "all"}, {"policy": "api", "key": "user:42"}]}
//
// The cost defaults to 1; 0 peeks without charging: it answers whether the
// next request (one unit) would pass, 429 when it would not. The answer is the
// driving Result as JSON (see writeResult for the members) with the
// middleware's rate-limit header fields, and status 200 when allowed, 429
// when denied, 503 when the engine failed closed or the decision did not
// finish within Timeout, 400 for bad input (malformed JSON, unknown fields
// or policy, a negative cost, more than MaxChecks checks), 413 for a body
// over MaxBody. Every answer is JSON; errors are {"error": "..."}.
//
// In a batch answer the driving Result's members are joined by "index",
// the position of the check that drove the answer, and "checks", each
// check's own Result in request order as the engine holds it after the
// request, with "charged" saying whether its cost was taken. In a denied
// batch nothing is charged: the checks before the denying one show the
// units they gave back, and those after it, which were not decided
// ("decided": false), what a look at their key finds, "allowed" saying
// whether their cost would have passed.
//
// An API is safe for concurrent use.
type API struct {
	token    atomic.Pointer[[]byte]
	hosts    []string
	timeout  time.Duration
	maxBody  int64
	setMu    sync.Mutex // serializes SetPolicies and SetHeaders
	policies atomic.Pointer[policySet]
	conc     atomic.Pointer[map[string]ConcurrencyLimit]
	sample   *denylog.Sampler
	errs     denylog.Errors
}

// policySet is one generation of policies and header selection, with the
// Evaluator that writes their headers (it caches a description per limit set,
// so it is renewed with either).
type policySet struct {
	m    map[string]floodgate.Limiter
	hdr  httplimit.Headers
	eval *httplimit.Evaluator
}

// New returns the check API of cfg.
func New(cfg Config) *API {
	c := &API{
		timeout: cfg.Timeout,
		maxBody: cfg.MaxBody,
		sample:  denylog.New(cfg.Logger, cfg.RawKeys),
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBody
	}
	c.errs.Log = c.sample.Logger()
	c.hosts = cfg.AllowedHosts
	c.SetToken(cfg.Token)
	c.set(cfg.Policies, cfg.Headers)
	c.SetConcurrency(cfg.Concurrency)
	return c
}

// SetToken replaces the token, e.g. when a reload read a rotated
// token_file: the next request needs the new one. An empty token turns the
// check off.
func (c *API) SetToken(token string) {
	b := []byte(token)
	c.token.Store(&b)
}

// SetPolicies replaces the policies atomically: a request decides under the
// old set or the new one, never a mix. The map must not be changed
// afterwards.
func (c *API) SetPolicies(p map[string]floodgate.Limiter) {
	c.setMu.Lock()
	defer c.setMu.Unlock()
	c.set(p, c.policies.Load().hdr)
}

// SetHeaders replaces the header selection (Config.Headers), e.g. on a
// reload: the next answer follows it, the lease endpoints' too.
func (c *API) SetHeaders(h httplimit.Headers) {
	c.setMu.Lock()
	defer c.setMu.Unlock()
	c.set(c.policies.Load().m, h)
}

// set stores the policies p with the header selection h; the caller holds
// setMu (or is New).
func (c *API) set(p map[string]floodgate.Limiter, h httplimit.Headers) {
	// The 429 body is the check API's own JSON, so the Evaluator's is off.
	d, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{Headers: h, Body: httplimit.BodyNone, Logger: c.sample.Logger()})
	if err != nil {
		panic(err) // the config is fixed and valid
	}
	c.policies.Store(&policySet{m: p, hdr: h, eval: d})
}

// checkRequest is one check of a request body. Cost is a pointer so that an
// explicit 0 (peek) differs from an absent cost (1).
type checkRequest struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Cost   *int64 `json:"cost"`
}

type batchRequest struct {
	checkRequest
	Checks []checkRequest `json:"checks"`
}

// checkState is what one request needs, pooled: the body buffer, the checks and
// the answer being built.
type checkState struct {
	body    bytes.Buffer
	req     batchRequest
	charges []httplimit.Charge
	v       httplimit.Answer
	out     []byte
}

var checkPool = sync.Pool{New: func() any { return new(checkState) }}

func (c *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case Path:
	case AcquirePath, RenewPath, ReleasePath:
		if c.guard(w, r) {
			c.serveLease(w, r)
		}
		return
	default:
		writeError(w, http.StatusNotFound, "not found; the check API answers POST "+Path+", "+AcquirePath+", "+RenewPath+" and "+ReleasePath)
		return
	}
	if !c.guard(w, r) {
		return
	}
	c.serveCheck(w, r)
}

// guard answers a request that may not be decided (wrong method, Host,
// Origin, content type or token) and reports whether r may go on.
func (c *API) guard(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "use POST with a JSON body")
		return false
	}
	if !webguard.HostAllowed(r, c.hosts) {
		writeError(w, http.StatusForbidden, "Host "+strconv.Quote(r.Host)+" is not a name of this listener; list it in check.allowed_hosts")
		return false
	}
	if !webguard.SameOrigin(r) {
		writeError(w, http.StatusForbidden, "a cross-site request may not spend a key's budget")
		return false
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		// A page elsewhere can make a browser POST text/plain or a form
		// without asking; only a JSON body (which needs a preflight the
		// API never grants) is a decision request.
		writeError(w, http.StatusUnsupportedMediaType, "send the body as Content-Type: application/json")
		return false
	}
	if token := *c.token.Load(); len(token) > 0 {
		if !webguard.Bearer(r, string(token)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate check"`)
			writeError(w, http.StatusUnauthorized, "send the check API's token as Authorization: Bearer <token>")
			return false
		}
	}
	return true
}

// serveCheck answers POST /v1/check.
func (c *API) serveCheck(w http.ResponseWriter, r *http.Request) {
	st := checkPool.Get().(*checkState)
	defer func() {
		if st.body.Cap() > 1<<16 {
			return // a large body's buffer is not kept
		}
		st.body.Reset()
		st.req = batchRequest{}
		clear(st.charges) // drop the limiters, which a reload may retire
		st.v = httplimit.Answer{}
		st.charges, st.out = st.charges[:0], st.out[:0]
		checkPool.Put(st)
	}()
	if _, err := st.body.ReadFrom(io.LimitReader(r.Body, c.maxBody+1)); err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if int64(st.body.Len()) > c.maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", c.maxBody))
		return
	}
	dec := json.NewDecoder(&st.body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st.req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "malformed JSON: more than one value in the body")
		return
	}
	ps := c.policies.Load()
	batch := st.req.Checks != nil
	reqs := st.req.Checks
	if !batch {
		reqs = []checkRequest{st.req.checkRequest}
	} else if st.req.Policy != "" || st.req.Key != "" || st.req.Cost != nil {
		writeError(w, http.StatusBadRequest, `give either "checks" or one check's "policy", "key" and "cost", not both`)
		return
	}
	switch {
	case len(reqs) == 0:
		writeError(w, http.StatusBadRequest, `"checks" is empty; give at least one check`)
		return
	case len(reqs) > MaxChecks:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%d checks, more than the %d one request may carry", len(reqs), MaxChecks))
		return
	}
	for i, q := range reqs {
		var lim floodgate.Limiter
		if ps != nil {
			lim = ps.m[q.Policy]
		}
		if lim == nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("check %d: unknown policy %q", i+1, q.Policy))
			return
		}
		if q.Key == "" {
			// An empty key would be one bucket shared by every caller that
			// left it out.
			writeError(w, http.StatusBadRequest, fmt.Sprintf("check %d: give the key to decide for (\"key\"), e.g. \"user:42\"", i+1))
			return
		}
		cost := int64(1)
		if q.Cost != nil {
			if cost = *q.Cost; cost < 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("check %d: cost %d is negative; use 0 to peek", i+1, cost))
				return
			}
		}
		ch := httplimit.Charge{Limiter: lim, Key: q.Key, Cost: cost}
		if cost == 0 {
			// A peek asks whether the next request, of one unit, would pass.
			ch.Cost, ch.Peek = 1, true
		}
		st.charges = append(st.charges, ch)
	}

	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	v := &st.v
	ps.eval.Evaluate(ctx, v, st.charges...)
	cancel()
	res, drive, err := v.Result(), v.Drive(), v.Err()
	if err != nil {
		c.errs.Error(r.Context(), "check: undecided", slog.String("policy", st.charges[drive].Limiter.Name()), slog.Any("error", err))
		status := http.StatusServiceUnavailable
		if errors.Is(err, floodgate.ErrInvalidCost) {
			status = http.StatusBadRequest
		}
		writeError(w, status, "the rate limiter could not decide: "+err.Error())
		return
	}
	// The status of a refusal is the middleware's (429 for a limit's
	// denial, 503 when the engine failed closed); what is served is 200
	// here, with the Result as its body.
	status := v.Status()
	switch status {
	case 0:
		status = http.StatusOK
	case http.StatusTooManyRequests:
		c.sample.Denied(r.Context(), "check", st.charges[drive].Key, &res, false)
	}
	h := w.Header()
	// The headers include a fail-closed denial's Retry-After, unless
	// Headers.DisableRetryAfter leaves it out.
	v.Headers(func(name, value string) { h[name] = append(h[name], value) })
	h["Content-Type"] = []string{"application/json"}
	b := appendResult(st.out, &res)
	if batch {
		b = b[:len(b)-1] // reopen the object
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(drive), 10)
		b = append(b, `,"checks":[`...)
		for i := range st.charges {
			if i > 0 {
				b = append(b, ',')
			}
			ch := &st.charges[i]
			ri, decided := c.held(r.Context(), v, i, drive, ch)
			b = appendResult(b, &ri)
			b = b[:len(b)-1]
			b = append(b, `,"charged":`...)
			b = strconv.AppendBool(b, res.Allowed && !ch.Peek)
			if !decided {
				b = append(b, `,"decided":false`...)
			}
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	b = append(b, '\n')
	st.out = b
	w.WriteHeader(status)
	w.Write(b)
}

// held is check i of a batch as the engine holds it after the request: its
// Result when the batch was admitted; in a denied batch the denying
// check's Result, an earlier check's with its refunded units back, and a
// later (undecided) check's state from a look at its key, allowed when its
// cost would pass. decided is false for the last kind.
func (c *API) held(ctx context.Context, v *httplimit.Answer, i, drive int, ch *httplimit.Charge) (res floodgate.Result, decided bool) {
	res = v.ResultOf(i)
	switch {
	case v.Result().Allowed || i == drive:
		return res, true
	case i < drive:
		if res.Allowed && res.Set != nil && !ch.Peek {
			res.Remaining = min(res.Remaining+ch.Cost, res.Limit.Capacity())
		}
		return res, true
	}
	peek, err := floodgate.PeekN(ctx, ch.Limiter, ch.Key, ch.Cost)
	if err != nil {
		return floodgate.Result{Policy: ch.Limiter.Name(), Source: httplimit.SourceError}, false
	}
	return peek, false
}

// appendResult appends res as the JSON object the check API answers:
//
//	{"allowed":true,"policy":"api","source":"redis",
//	 "limit":{"rate":100,"period":"min","period_seconds":60,"burst":100,"algorithm":"gcra"},
//	 "remaining":99,"reset_after":0.6,"retry_after":0}
//
// Durations are seconds as JSON numbers with millisecond precision, rounded
// up (so a client that waits retry_after is never early); retry_after is
// null when the request can never pass (its cost is above the limit's
// capacity). A fail-open or fail-closed Result read no state and has no
// "limit", "remaining" or "reset_after".
func appendResult(b []byte, res *floodgate.Result) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, res.Allowed)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, res.Policy)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, string(res.Source))
	if res.HasState() {
		l := res.Limit
		b = append(b, `,"limit":{"rate":`...)
		b = strconv.AppendInt(b, l.Rate, 10)
		b = append(b, `,"period":`...)
		b = appendJSONString(b, textform.Period(l.Period))
		b = append(b, `,"period_seconds":`...)
		b = appendSeconds(b, l.Period)
		b = append(b, `,"burst":`...)
		b = strconv.AppendInt(b, l.Capacity(), 10)
		b = append(b, `,"algorithm":"`...)
		b = append(b, l.Algorithm.String()...)
		b = append(b, `"},"remaining":`...)
		b = strconv.AppendInt(b, res.Remaining, 10)
		b = append(b, `,"reset_after":`...)
		b = appendSeconds(b, res.ResetAfter)
	}
	b = append(b, `,"retry_after":`...)
	if res.RetryAfter == floodgate.RetryNever {
		b = append(b, "null"...)
	} else {
		b = appendSeconds(b, res.RetryAfter)
	}
	return append(b, '}')
}

// appendSeconds appends d as seconds with up to three decimals, rounded
// up to the millisecond.
func appendSeconds(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, '0')
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 && ms < math.MaxInt64 {
		ms++
	}
	b = strconv.AppendInt(b, ms/1000, 10)
	if frac := ms % 1000; frac != 0 {
		b = append(b, '.')
		digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 3
		for n > 0 && digits[n-1] == '0' {
			n--
		}
		b = append(b, digits[:n]...)
	}
	return b
}

// writeError answers status with {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header()["Content-Type"] = []string{"application/json"}
	w.WriteHeader(status)
	b := append(appendJSONString([]byte(`{"error":`), msg), "}\n"...)
	w.Write(b)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD (encoding/json's rule).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
