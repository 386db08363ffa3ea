// Package throttle is concurrency-limiting net/http middleware: at most n
// requests served at once, per key or shared, with a wait queue, slots
// shared by every instance through redislease, or an adaptive limit
// (concurrency/adaptive). Package concurrency holds the slots; this package
// speaks HTTP: 503 (or 429 per key), the X-Concurrency-* fields and a body
// that says why.
//
//	mux.Handle("/", throttle.Limit(100)(handler))
package throttle

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/statuswriter"
)

// Limit returns middleware that serves at most n requests at once and
// refuses the rest at once with 503 Service Unavailable: chi's Throttle,
// with headers and a body that say what happened.
//
//	mux.Handle("/", throttle.Limit(100)(handler))
//
// Limit panics if n is not positive, like time.NewTicker does for a bad
// interval: n is a constant of the program. New returns errors
// instead, and limits per key, across instances or adaptively.
func Limit(n int) func(http.Handler) http.Handler {
	return Backlog(n, 0, 0)
}

// Backlog is Limit with a wait queue: up to backlog requests
// wait, at most timeout each (0 means concurrency.DefaultMaxWait), for one
// of the n slots; a request that finds the queue full, or waits out the
// timeout, is refused with 503.
func Backlog(n, backlog int, timeout time.Duration) func(http.Handler) http.Handler {
	l, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "throttle", Limit: n, MaxWaiting: backlog, MaxWait: timeout})
	if err != nil {
		panic(fmt.Sprintf("throttle.Backlog(%d, %d, %s): %v", n, backlog, timeout, err))
	}
	t, err := New(Config{Limiter: l})
	if err != nil {
		panic("throttle.Backlog: " + err.Error())
	}
	return t.Handler
}

// Config configures a Throttler. Limiter is the only field that
// must be set.
type Config struct {
	// Limiter holds the slots: its store (concurrency.NewLocal, or
	// redislease for slots shared by every instance), its limit or
	// adaptive Controller, and its wait queue.
	Limiter *concurrency.Limiter

	// Key, when set, gives each key (a client, see httplimit.KeyByIP and
	// httplimit.KeyByHeader)
	// slots of its own, so that one client's slow requests cannot take the
	// others' slots; the refusal is then 429, since the client can slow
	// down. Nil shares the slots among every request, and a refusal is 503:
	// the server is at capacity.
	Key httplimit.KeyFunc

	// Skip exempts requests: they are served without a slot and without
	// headers. Nil exempts none.
	Skip func(r *http.Request) bool

	// Outcome tells the Limiter's Controller how a served request ended,
	// from its status: nil means DefaultOutcome. It is not called for a
	// request whose client went away (Ignore) or whose handler panicked
	// (Ignore). Without a Controller it is not used.
	Outcome func(status int) concurrency.Outcome

	// NoHeaders leaves out the X-Concurrency fields.
	NoHeaders bool

	// Body selects the body of a refusal, as httplimit.Config.Body does
	// for a rate limit.
	Body httplimit.Body

	// OnRefused, if set, writes every refusal instead of the default
	// status and body; the headers are already set. res.Reason says why.
	OnRefused func(w http.ResponseWriter, r *http.Request, res concurrency.Result)
}

// DefaultOutcome counts 429, 502, 503 and 504 as Dropped (the work behind
// the handler is overloaded or timing out) and every other status as
// Success.
func DefaultOutcome(status int) concurrency.Outcome {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return concurrency.Dropped
	}
	return concurrency.Success
}

// A Throttler is concurrency-limiting net/http middleware. It is safe for
// concurrent use.
type Throttler struct {
	lim       *concurrency.Limiter
	key       httplimit.KeyFunc
	skip      func(*http.Request) bool
	outcome   func(int) concurrency.Outcome
	headers   bool
	body      httplimit.Body
	onRefused func(http.ResponseWriter, *http.Request, concurrency.Result)
	adaptive  bool

	// bodies are the refusals' bodies by status (429, 503) and reason,
	// built once: a refusal is the response an overloaded server sends
	// most, and must cost it little.
	bodies [2][reasons][]byte

	// big holds the header values of the latest limit too large for
	// smallVals, so that a request under it formats no number.
	big atomic.Pointer[bigVals]
}

// bigVals are the header values of one limit of len(smallVals) or more:
// the limit, and the remaining slots while few are taken (filled as they
// are first sent).
type bigVals struct {
	limit int
	val   []string
	rem   [256]atomic.Pointer[[]string] // by slots taken
}

// remaining is the value of HeaderRemaining when inFlight of
// the limit's slots are taken.
func (b *bigVals) remaining(inFlight int) []string {
	n := max(b.limit-inFlight, 0)
	if n < len(smallVals) {
		return smallVals[n]
	}
	if inFlight < 0 || inFlight >= len(b.rem) {
		return []string{strconv.Itoa(n)}
	}
	if v := b.rem[inFlight].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	b.rem[inFlight].Store(&v)
	return v
}

// reasons bounds the concurrency.Reason values a Throttler knows.
const reasons = int(concurrency.ReasonError) + 1

// Header values shared by every response. Their slices have no spare
// capacity, so a handler that adds a value to the field appends to a copy.
var (
	ctProblem  = []string{"application/problem+json"}
	ctJSON     = []string{"application/json"}
	reasonVals = func() (v [reasons][]string) {
		for r := range v {
			v[r] = []string{concurrency.Reason(r).String()}
		}
		return v
	}()
	smallVals = func() (v [1024][]string) {
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// intVal is n as a header value, shared when n is small.
func intVal(n int) []string {
	if n >= 0 && n < len(smallVals) {
		return smallVals[n]
	}
	return []string{strconv.Itoa(n)}
}

// limitVals returns the header values of limit, which is at least
// len(smallVals); a limit that changed (a Controller's) replaces those kept.
func (t *Throttler) limitVals(limit int) *bigVals {
	if b := t.big.Load(); b != nil && b.limit == limit {
		return b
	}
	b := &bigVals{limit: limit, val: []string{strconv.Itoa(limit)}}
	t.big.Store(b)
	return b
}

// The header fields a Throttler sends. They are fields of their own rather
// than the IETF RateLimit fields: those belong to the rate limits of the
// same response (Middleware sets them whole), and a client reading them
// expects a quota that refills over time, where a slot comes back only when
// work in flight ends.
const (
	// HeaderLimit is the number of slots of the request's key.
	HeaderLimit = "X-Concurrency-Limit"
	// HeaderRemaining is the number of slots free after this
	// request took its own (absent when the store did not say, after a
	// failure mode decided).
	HeaderRemaining = "X-Concurrency-Remaining"
	// HeaderRefused names why a request was refused: "full",
	// "queue-full", "timeout", "canceled", "fail-closed" or "error"
	// (concurrency.Reason).
	HeaderRefused = "X-Concurrency-Refused"
)

// New validates cfg and returns its Throttler.
func New(cfg Config) (*Throttler, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%w: Config.Limiter is nil; build one with concurrency.New", httplimit.ErrInvalidConfig)
	}
	if cfg.Body > httplimit.BodyNone {
		return nil, fmt.Errorf("%w: unknown Body %d", httplimit.ErrInvalidConfig, cfg.Body)
	}
	t := &Throttler{
		lim: cfg.Limiter, key: cfg.Key, skip: cfg.Skip, outcome: cfg.Outcome,
		headers: !cfg.NoHeaders, body: cfg.Body, onRefused: cfg.OnRefused,
		adaptive: cfg.Limiter.Adaptive(),
	}
	if t.outcome == nil {
		t.outcome = DefaultOutcome
	}
	for i, status := range [2]int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		for r := range reasons {
			t.bodies[i][r] = t.appendBody(nil, status, concurrency.Reason(r))
		}
	}
	return t, nil
}

// Handler wraps next.
func (t *Throttler) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.skip != nil && t.skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		var key string
		if t.key != nil {
			key = t.key(r)
		}
		// Do holds the slot while next serves, and frees it when next
		// returns or panics (a panic says nothing of the work's speed: the
		// Controller does not see it).
		res := t.lim.Do(r.Context(), key, func(res concurrency.Result) concurrency.Outcome {
			if t.headers {
				t.writeHeaders(w, res)
			}
			if !t.adaptive {
				next.ServeHTTP(w, r)
				return concurrency.Success
			}
			sw := &statuswriter.Writer{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			switch {
			case r.Context().Err() != nil:
				return concurrency.Ignore
			case sw.Status == 0:
				return t.outcome(http.StatusOK)
			}
			return t.outcome(sw.Status)
		})
		if !res.Allowed {
			if t.headers {
				t.writeHeaders(w, res)
			}
			t.refuse(w, r, res)
		}
	})
}

// Status returns the status of a refusal: 429 when the request's key has
// slots of its own (Config.Key), 503 when the slots are shared or
// the limiter failed.
func (t *Throttler) Status(res concurrency.Result) int {
	switch res.Reason {
	case concurrency.ReasonFull, concurrency.ReasonQueueFull, concurrency.ReasonTimeout:
		if t.key != nil {
			return http.StatusTooManyRequests
		}
	}
	return http.StatusServiceUnavailable
}

func (t *Throttler) writeHeaders(w http.ResponseWriter, res concurrency.Result) {
	h := w.Header()
	if res.Limit < len(smallVals) {
		h[HeaderLimit] = intVal(res.Limit)
		if res.InFlight >= 0 {
			h[HeaderRemaining] = intVal(max(res.Limit-res.InFlight, 0))
		}
	} else {
		b := t.limitVals(res.Limit)
		h[HeaderLimit] = b.val
		if res.InFlight >= 0 {
			h[HeaderRemaining] = b.remaining(res.InFlight)
		}
	}
	if !res.Allowed && int(res.Reason) < reasons {
		h[HeaderRefused] = reasonVals[res.Reason]
	}
}

func (t *Throttler) refuse(w http.ResponseWriter, r *http.Request, res concurrency.Result) {
	if res.Reason == concurrency.ReasonFailClosed && res.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(httplimit.RetryAfterSeconds(res.RetryAfter), 10))
	}
	if t.onRefused != nil {
		t.onRefused(w, r, res)
		return
	}
	status := t.Status(res)
	switch t.body {
	case httplimit.BodyProblem:
		w.Header()["Content-Type"] = ctProblem
	case httplimit.BodyJSON:
		w.Header()["Content-Type"] = ctJSON
	}
	w.WriteHeader(status)
	i := 1
	if status == http.StatusTooManyRequests {
		i = 0
	}
	if int(res.Reason) < reasons {
		if b := t.bodies[i][res.Reason]; len(b) > 0 {
			w.Write(b)
		}
	}
}

// appendBody appends the body of a refusal with status for reason r.
func (t *Throttler) appendBody(b []byte, status int, r concurrency.Reason) []byte {
	detail := refusalDetail(r)
	switch t.body {
	case httplimit.BodyProblem:
		b = append(b, `{"type":"about:blank","title":`...)
		b = strconv.AppendQuote(b, http.StatusText(status))
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, `,"detail":`...)
		b = strconv.AppendQuote(b, detail)
		b = append(b, `,"reason":`...)
		b = strconv.AppendQuote(b, r.String())
		return append(b, "}\n"...)
	case httplimit.BodyJSON:
		b = append(b, `{"error":`...)
		b = strconv.AppendQuote(b, detail)
		b = append(b, `,"reason":`...)
		b = strconv.AppendQuote(b, r.String())
		return append(b, "}\n"...)
	}
	return b
}

func refusalDetail(r concurrency.Reason) string {
	switch r {
	case concurrency.ReasonFull:
		return "Too many requests are in progress; retry when one finishes."
	case concurrency.ReasonQueueFull:
		return "Too many requests are in progress and waiting; retry later."
	case concurrency.ReasonTimeout:
		return "No request finished while this one waited; retry later."
	case concurrency.ReasonCanceled:
		return "The request was canceled while it waited."
	case concurrency.ReasonFailClosed:
		return "The concurrency limiter is unavailable; retry shortly."
	}
	return "The concurrency limiter could not decide."
}
