package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
)

// Defaults for the zero values of Options.
const (
	// DefaultMaxRetries is how many times a refused request is sent again:
	// enough to ride out a pause or two, few enough that a server that
	// keeps refusing is not hammered.
	DefaultMaxRetries = 3

	// DefaultBackoff is the first retry delay when the server names none
	// (a 503 or 429 without Retry-After or a reset); it doubles per retry.
	DefaultBackoff = 250 * time.Millisecond

	// DefaultMaxPause caps how long one answer can pause an upstream, so
	// that a Retry-After of a year (or a garbage date) does not stop a
	// service for a year.
	DefaultMaxPause = 10 * time.Minute
)

// Errors a RoundTrip returns without sending. Each is wrapped with the
// upstream and the wait that did not fit.
var (
	// ErrDeadline: the request would have to wait (for budget, a pause or
	// a retry) past its context's deadline, so it fails at once and
	// charges nothing. Give it a longer deadline, or a lower rate to the
	// callers that share the budget.
	ErrDeadline = errors.New("outbound: the wait does not fit in the request's deadline")
)

// A WaitCause says what a RoundTrip waited for.
type WaitCause string

// The causes of waits.
const (
	// WaitBudget: the client-side limiter (Options.Limiter) had no units.
	WaitBudget WaitCause = "budget"
	// WaitPause: the upstream was paused after a 429 or a zero remaining.
	WaitPause WaitCause = "pause"
	// WaitBackoff: a retry waited out its back-off.
	WaitBackoff WaitCause = "backoff"
	// WaitLearned: the upstream is paced at the rate learned from its
	// refusals (see Transport).
	WaitLearned WaitCause = "learned"
)

// An Observer is told what a Transport does, for metrics and logs
// (metrics.NewOutbound returns one that exports Prometheus metrics). Its
// methods run on the request's goroutine and must be quick and safe for
// concurrent use.
type Observer interface {
	// Waited reports that a request waited d for cause before it was sent.
	Waited(upstream string, cause WaitCause, d time.Duration)
	// Paused reports that an answer of status code paused upstream for d.
	Paused(upstream string, code int, d time.Duration)
	// Retried reports that a request refused with code is sent again.
	Retried(upstream string, code int)
	// BreakerChanged reports a transition of upstream's circuit breaker.
	BreakerChanged(upstream string, from, to failover.BreakerState)
}

// Options configures a Transport. The zero value sends through
// http.DefaultTransport, keeps pauses in memory, retries DefaultMaxRetries
// times and breaks per upstream with failover's defaults.
type Options struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Limiter is the budget every request waits for before it is sent,
	// one unit per request under the key Upstream names. Nil means no
	// budget of the client's own: only what the servers say is obeyed. A
	// limiter over redisstore shares one budget among every instance.
	Limiter floodgate.Limiter

	// Upstream names the upstream of a request: the key of its budget,
	// its pause and its breaker. Nil means the request's URL host
	// (host[:port]). Name one API under one key even when it is served
	// from several hosts, if they share its quota.
	Upstream func(*http.Request) string

	// Pauses holds the pauses. Nil means a MemoryPauses of this
	// Transport; a RedisPauses pauses every instance on one 429.
	Pauses PauseStore

	// MaxRetries bounds how many times one request is sent again after a
	// 429 or 503. 0 means DefaultMaxRetries; negative means never.
	MaxRetries int

	// Backoff is the first retry delay when the server names none. 0
	// means DefaultBackoff.
	Backoff time.Duration

	// MaxPause caps one pause. 0 means DefaultMaxPause.
	MaxPause time.Duration

	// Breaker configures the failover.Breaker of each upstream:
	// FailureRate, MinCalls, Window, Backoff, MaxBackoff, OnError,
	// OnStateChange, OnTransition and Clock are used as
	// failover.BreakerOptions documents them. Name, Timeout, SlowTimeout
	// and ContextBound are the Transport's: a breaker is named after its
	// upstream, and a request is bounded by its own context alone
	// (failover.NoTimeout). The breaker opens only once MinCalls (default
	// 20) calls fall within its Window (default 10 s): lower MinCalls for
	// an upstream called less often than that.
	Breaker failover.BreakerOptions

	// Observer is told of waits, pauses, retries and breaker transitions.
	// Nil means nobody.
	Observer Observer
}

// maxUpstreams bounds the upstreams that get a breaker and a learned rate
// of their own. Upstreams are few in any sane program; one that names an
// upstream per request (an Upstream function gone wrong) must not grow
// memory without bound, so upstreams past the bound are sent to without a
// breaker and without learning.
const maxUpstreams = 1024

// A Transport is an http.RoundTripper for calling rate-limited APIs
// politely. Before sending, a request waits out its upstream's pause and
// its budget (Options.Limiter); the answer's rate-limit fields
// (ParseAdvice) pause the upstream when it refused (429, or 503 with a
// Retry-After) or said nothing is left; a refused request that may be sent
// again (Retryable) is, after the pause, up to MaxRetries times; and each
// upstream has a circuit breaker that opens when too many of its calls fail
// (transport errors, 500, 502, 503 and 504). No wait ever goes past the
// request's deadline: a request that cannot wait long enough fails at once
// with ErrDeadline, or, when it was already refused, returns that answer.
//
// A Transport also learns what each upstream really admits, which may be
// less than the Limiter allows and less than the server advertises: a
// refusal halves the rate the upstream was being sent at, and from then on
// its requests are paced at the learned rate, raised a step after every
// run of admitted answers (LearnedRate; the learn.go comment has the
// rule). The learned rate is kept in this process, per upstream.
//
// A Transport is safe for concurrent use.
type Transport struct {
	base       http.RoundTripper
	limiter    floodgate.Limiter
	upstream   func(*http.Request) string
	pauses     PauseStore
	maxRetries int
	backoff    time.Duration
	maxPause   time.Duration
	brOpts     failover.BreakerOptions
	obs        Observer

	mu  sync.Mutex
	ups map[string]*upstreamState
}

// upstreamState is what a Transport keeps of one upstream.
type upstreamState struct {
	br    *failover.Breaker // nil past maxUpstreams
	learn learner
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport configured by o.
func New(o Options) (*Transport, error) {
	switch {
	case o.Backoff < 0:
		return nil, fmt.Errorf("outbound: Backoff %s is negative; use 0 for the default of %s", o.Backoff, DefaultBackoff)
	case o.MaxPause < 0:
		return nil, fmt.Errorf("outbound: MaxPause %s is negative; use 0 for the default of %s", o.MaxPause, DefaultMaxPause)
	}
	t := &Transport{base: o.Base, limiter: o.Limiter, upstream: o.Upstream, pauses: o.Pauses,
		maxRetries: o.MaxRetries, backoff: o.Backoff, maxPause: o.MaxPause, brOpts: o.Breaker, obs: o.Observer,
		ups: make(map[string]*upstreamState)}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.upstream == nil {
		t.upstream = func(r *http.Request) string { return r.URL.Host }
	}
	if t.pauses == nil {
		t.pauses = NewMemoryPauses()
	}
	switch {
	case t.maxRetries == 0:
		t.maxRetries = DefaultMaxRetries
	case t.maxRetries < 0:
		t.maxRetries = 0
	}
	if t.backoff == 0 {
		t.backoff = DefaultBackoff
	}
	if t.maxPause == 0 {
		t.maxPause = DefaultMaxPause
	}
	if t.obs == nil {
		t.obs = nopObserver{}
	}
	t.brOpts.Timeout, t.brOpts.SlowTimeout, t.brOpts.ContextBound = failover.NoTimeout, failover.NoTimeout, true
	// The options are checked once here, so that a bad one is an error of
	// New, not of a request.
	if _, err := failover.NewBreaker(t.brOpts); err != nil {
		return nil, fmt.Errorf("outbound: Breaker: %w", err)
	}
	return t, nil
}

// Client returns an http.Client that sends through t.
func (t *Transport) Client() *http.Client { return &http.Client{Transport: t} }

// BreakerState returns the state of upstream's circuit breaker: Closed for
// an upstream not called yet.
func (t *Transport) BreakerState(upstream string) failover.BreakerState {
	st := t.lookup(upstream)
	if st == nil {
		return failover.Closed
	}
	return st.br.State()
}

// BreakerStats returns the counters of upstream's breaker, for
// metrics.WatchGuard-style exports; ok is false for an upstream not
// called yet.
func (t *Transport) BreakerStats(upstream string) (s failover.Stats, ok bool) {
	st := t.lookup(upstream)
	if st == nil {
		return s, false
	}
	return st.br.Stats(), true
}

// LearnedRate returns the rate, in requests per second, at which upstream
// is paced after its server refused requests the Transport thought it had
// budget for; ok is false while nothing is learned (no refusal yet, or an
// upstream not called).
func (t *Transport) LearnedRate(upstream string) (perSecond float64, ok bool) {
	st := t.lookup(upstream)
	if st == nil {
		return 0, false
	}
	r := st.learn.learned()
	return r, r > 0
}

func (t *Transport) lookup(upstream string) *upstreamState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ups[upstream]
}

// state returns upstream's state, made on its first call; nil past
// maxUpstreams.
func (t *Transport) state(upstream string) *upstreamState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.ups[upstream]; ok {
		return st
	}
	if len(t.ups) >= maxUpstreams {
		return nil
	}
	o := t.brOpts
	o.Name = upstream
	next, obs := o.OnStateChange, t.obs
	o.OnStateChange = func(from, to failover.BreakerState) {
		obs.BreakerChanged(upstream, from, to)
		if next != nil {
			next(from, to)
		}
	}
	b, err := failover.NewBreaker(o)
	if err != nil {
		// New checked these options; only the name differs.
		return nil
	}
	st := &upstreamState{br: b}
	st.learn.min = 1 / t.maxPause.Seconds()
	t.ups[upstream] = st
	return st
}

type retryKey struct{}

// Retryable returns a context whose requests the Transport may send again
// after a 429 or 503 although their method is not idempotent: the caller
// promises that sending twice does no harm (the server deduplicates, or
// the call has no effect). A request with an Idempotency-Key header is
// retryable without it.
func Retryable(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryKey{}, true)
}

// retryable reports whether req may be sent again: its method is
// idempotent (RFC 9110, section 9.2.2), it carries an Idempotency-Key, or
// its context says so; and its body can be sent again (none, or GetBody).
func retryable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if req.Header.Get("Idempotency-Key") != "" {
		return true
	}
	v, _ := req.Context().Value(retryKey{}).(bool)
	return v
}

// errUnhealthy marks an answer that counts against the breaker.
var errUnhealthy = errors.New("outbound: upstream answered with a server error")

func unhealthy(code int) bool {
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	up := t.upstream(req)
	st := t.state(up)
	canRetry := t.maxRetries > 0 && retryable(req)
	r := req
	for attempt := 0; ; attempt++ {
		if err := t.admit(ctx, up, st); err != nil {
			closeBody(r)
			return nil, err
		}
		sentAt := time.Now()
		if st != nil {
			st.learn.sending(sentAt)
		}
		resp, err := t.send(ctx, st, r)
		if err != nil {
			if t.limiter != nil && errors.Is(err, failover.ErrOpen) {
				// Not sent: the unit goes back to the budget.
				t.limiter.RefundN(context.WithoutCancel(ctx), up, 1)
			}
			return nil, fmt.Errorf("outbound: %s: %w", up, err)
		}
		pause := t.adapt(ctx, up, st, resp, attempt, sentAt)
		code := resp.StatusCode
		if (code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable) || !canRetry || attempt >= t.maxRetries {
			return resp, nil
		}
		wait := pause
		if wait == 0 {
			wait = t.backoffFor(attempt)
		}
		// A pause is waited out with its jitter (waitPause): a retry
		// that could not afford the longest is not started, so that the
		// caller gets the refusal rather than ErrDeadline.
		if !fits(ctx, wait+pauseJitter(pause)) {
			return resp, nil
		}
		next, err := rewind(req)
		if err != nil {
			return resp, nil
		}
		drain(resp)
		t.obs.Retried(up, code)
		if pause == 0 {
			if err := sleep(ctx, wait); err != nil {
				closeBody(next)
				return nil, fmt.Errorf("outbound: %s: retry: %w", up, err)
			}
			t.obs.Waited(up, WaitBackoff, wait)
		}
		r = next
	}
}

// admit waits until up is not paused, its learned rate has a slot for
// the request and the budget has a unit for it.
func (t *Transport) admit(ctx context.Context, up string, st *upstreamState) error {
	for {
		if err := t.waitPause(ctx, up); err != nil {
			return err
		}
		slot, paced, err := t.waitLearned(ctx, up, st)
		if err != nil {
			return err
		}
		slept, err := t.waitBudget(ctx, up)
		if err != nil {
			if st != nil {
				st.learn.cancel(slot)
			}
			return err
		}
		if !slept && !paced {
			return nil
		}
		// A wait may have overlapped a pause another caller set: the
		// unit goes back and the pause is waited out.
		if t.pauses.PausedUntil(ctx, up).After(time.Now()) {
			if t.limiter != nil {
				t.limiter.RefundN(context.WithoutCancel(ctx), up, 1)
			}
			continue
		}
		return nil
	}
}

// waitLearned takes the request's slot at up's learned rate and waits
// for it, as long as the context allows; it returns the slot (to give
// back if the request is not sent after all) and whether it slept. A slot
// that cannot come before the deadline is not taken.
func (t *Transport) waitLearned(ctx context.Context, up string, st *upstreamState) (slot time.Time, slept bool, err error) {
	if st == nil {
		return slot, false, nil
	}
	now := time.Now()
	deadline, hasDeadline := ctx.Deadline()
	slot, ok := st.learn.reserve(now, deadline, hasDeadline)
	if !ok {
		return slot, false, fmt.Errorf("outbound: %s: paced at the learned rate: %w", up, ErrDeadline)
	}
	d := slot.Sub(now)
	if d <= 0 {
		return slot, false, nil
	}
	if err := sleep(ctx, d); err != nil {
		st.learn.cancel(slot)
		return slot, false, fmt.Errorf("outbound: %s: waiting for the learned rate: %w", up, err)
	}
	t.obs.Waited(up, WaitLearned, d)
	return slot, true, nil
}

// waitPause waits out up's pause, plus a jitter of up to a tenth of it (at
// most a second), so that the callers it held do not all send in the same
// instant.
func (t *Transport) waitPause(ctx context.Context, up string) error {
	until := t.pauses.PausedUntil(ctx, up)
	if until.IsZero() {
		return nil
	}
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	d += jitter(pauseJitter(d))
	if !fits(ctx, d) {
		return fmt.Errorf("outbound: %s: paused by the upstream for %s more: %w", up, d.Round(time.Millisecond), ErrDeadline)
	}
	if err := sleep(ctx, d); err != nil {
		return fmt.Errorf("outbound: %s: waiting out a pause: %w", up, err)
	}
	t.obs.Waited(up, WaitPause, d)
	return nil
}

// waitBudget takes one unit of the budget, waiting for it as long as the
// context allows (floodgate.WaitN: a wait that cannot fit fails at
// once and charges nothing), and reports whether it slept.
func (t *Transport) waitBudget(ctx context.Context, up string) (slept bool, err error) {
	if t.limiter == nil {
		return false, nil
	}
	start := time.Now()
	res, err := floodgate.WaitN(ctx, t.limiter, up, 1)
	if err != nil {
		if errors.Is(err, floodgate.ErrWaitDeadline) {
			return false, fmt.Errorf("outbound: %s: budget: %w: %w", up, ErrDeadline, err)
		}
		return false, fmt.Errorf("outbound: %s: budget: %w", up, err)
	}
	// A reservation says how long it waited; a window limit, which WaitN
	// waits on by asking again, says nothing, so the clock does.
	if d := time.Since(start); res.RetryAfter > 0 || d >= minObservedWait {
		t.obs.Waited(up, WaitBudget, max(res.RetryAfter, d))
		return true, nil
	}
	return false, nil
}

// minObservedWait is the shortest time in WaitN taken for a wait rather
// than for the engine's answer.
const minObservedWait = 10 * time.Millisecond

// send makes one round trip under the upstream's breaker.
func (t *Transport) send(ctx context.Context, st *upstreamState, r *http.Request) (*http.Response, error) {
	if st == nil {
		return t.base.RoundTrip(r)
	}
	rt := &roundTrip{base: t.base, req: r}
	err := st.br.Do(ctx, rt.run)
	switch {
	case rt.err != nil:
		return nil, rt.err
	case rt.resp != nil:
		return rt.resp, nil
	}
	if !rt.sent {
		closeBody(r)
	}
	return nil, err
}

// roundTrip is one request, made by its run under the upstream's breaker:
// run fails the breaker's count on a transport error or a server error.
type roundTrip struct {
	base http.RoundTripper
	req  *http.Request
	resp *http.Response
	err  error
	sent bool
}

func (rt *roundTrip) run(context.Context) error {
	rt.sent = true
	rt.resp, rt.err = rt.base.RoundTrip(rt.req)
	if rt.err != nil {
		return rt.err
	}
	if unhealthy(rt.resp.StatusCode) {
		return errUnhealthy
	}
	return nil
}

// adapt reads what resp, the answer to a request sent at sentAt, says
// about up's budget: it learns from it and pauses up when it refused or
// has nothing left. It returns the pause it set.
func (t *Transport) adapt(ctx context.Context, up string, st *upstreamState, resp *http.Response, attempt int, sentAt time.Time) time.Duration {
	now := time.Now()
	a := ParseAdvice(resp.Header, now)
	code := resp.StatusCode
	refused := a.Refused(code)
	if st != nil {
		st.learn.observe(sentAt, now, refused, !refused && code < 500, a.Rate)
	}
	d := t.pauseFor(a, code, attempt)
	if d <= 0 {
		return 0
	}
	t.pauses.Pause(ctx, up, now.Add(d))
	t.obs.Paused(up, code, d)
	return d
}

// pauseFor is the pause an answer of code with advice a sets: the wait it
// names (Advice.Wait), or the back-off for a 429 that names none, capped
// at MaxPause; 0 for none.
func (t *Transport) pauseFor(a Advice, code int, attempt int) time.Duration {
	d, ok := a.Wait(code)
	if !ok && code == http.StatusTooManyRequests {
		d = t.backoffFor(attempt)
	}
	return max(min(d, t.maxPause), 0)
}

// backoffFor is the delay of retry attempt+1 when the server named none:
// Backoff doubled per attempt, drawn at random from its upper half.
func (t *Transport) backoffFor(attempt int) time.Duration {
	d := t.backoff << min(attempt, 16)
	if d <= 0 || d > t.maxPause {
		d = t.maxPause
	}
	return d/2 + jitter(d/2)
}

// pauseJitter bounds the jitter added to a pause of d.
func pauseJitter(d time.Duration) time.Duration { return min(d/10, time.Second) }

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// fits reports whether a wait of d ends before ctx's deadline.
func fits(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > d
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// rewind returns a copy of req to send again, with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

// maxDrain bounds what is read from a refused answer before it is closed,
// so that its connection can be reused without reading a huge body.
const maxDrain = 64 << 10

func drain(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, maxDrain)
	resp.Body.Close()
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

type nopObserver struct{}

func (nopObserver) Waited(string, WaitCause, time.Duration)                             {}
func (nopObserver) Paused(string, int, time.Duration)                                   {}
func (nopObserver) Retried(string, int)                                                 {}
func (nopObserver) BreakerChanged(string, failover.BreakerState, failover.BreakerState) {}
