package outbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/settle"
	"github.com/floodgate-go/floodgate/tokencost"
)

// A TokenBudget is an http.RoundTripper that spends a client's own budget
// of LLM tokens against a provider's limit (tokens per minute, say): each
// call waits for its estimate (package tokencost: the request's
// max_tokens, its body's size for input, at the model's weight), is sent
// through Base, and is settled with the usage its response body or event
// stream reports as the caller reads it: the difference is refunded, or
// charged into debt so that the next calls wait, by the rule httplimit's
// token rules settle by. A count the response does not report in a way
// believed (a stream closed before its usage, a body not read to its end)
// keeps its estimate; so does a call that got no response, which the
// provider may have spent. Stack it over a Transport to obey the
// provider's answers too. A TokenBudget is safe for concurrent use; its
// fields must not change once it is in use.
type TokenBudget struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Limiter is the budget, in units of tokens at their weights. It must
	// be set. A limiter over redisstore shares one budget among every
	// instance.
	Limiter floodgate.Limiter

	// Tokens reads the calls' tokens. It must be set.
	Tokens *tokencost.Source

	// Count is which count the budget is charged: tokencost.Total (the
	// zero value), Input or Output.
	Count tokencost.Count

	// Key names the budget a request spends. Nil means the request's URL
	// host.
	Key func(*http.Request) string
}

// RoundTrip implements http.RoundTripper. A request whose estimate does
// not fit before its context's deadline fails at once with ErrDeadline and
// charges nothing.
func (b *TokenBudget) RoundTrip(req *http.Request) (*http.Response, error) {
	if b.Limiter == nil || b.Tokens == nil {
		closeBody(req)
		return nil, errors.New("outbound: TokenBudget needs a Limiter and a Tokens source")
	}
	ctx := req.Context()
	key := req.URL.Host
	if b.Key != nil {
		key = b.Key(req)
	}
	tl := b.Tokens.Begin(req)
	est := tl.Estimate(b.Count)
	c := floodgate.Check{Limiter: b.Limiter, Key: key, Cost: est, Look: est == 0}
	if est > 0 {
		res, err := floodgate.WaitN(ctx, b.Limiter, key, est)
		if err != nil {
			closeBody(req)
			if errors.Is(err, floodgate.ErrWaitDeadline) {
				return nil, fmt.Errorf("outbound: %s: token budget: %w: %w", key, ErrDeadline, err)
			}
			return nil, fmt.Errorf("outbound: %s: token budget: %w", key, err)
		}
		c.Result = res
	}
	base := b.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &tokenBody{body: resp.Body, h: resp.Header, tally: tl, settle: func() {
		settle.Charge(context.WithoutCancel(ctx), &c, tl.Cost(b.Count))
	}}
	return resp, nil
}

// tokenBody passes a response body to its tally as the caller reads it,
// and settles the call at its end or when it is closed.
type tokenBody struct {
	body    io.ReadCloser
	h       http.Header
	mu      sync.Mutex
	tally   *tokencost.Tally
	settle  func()
	settled bool
}

func (tb *tokenBody) Read(p []byte) (int, error) {
	n, err := tb.body.Read(p)
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if !tb.settled {
		tb.tally.Observe(tb.h, p[:n])
		if err != nil {
			tb.end()
		}
	}
	return n, err
}

func (tb *tokenBody) Close() error {
	err := tb.body.Close()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.end()
	return err
}

// end settles once.
func (tb *tokenBody) end() {
	if !tb.settled {
		tb.settled = true
		tb.settle()
	}
}
