package outbound_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/outbound"
	"github.com/floodgate-go/floodgate/tokencost"
	"github.com/floodgate-go/floodgate/tokencost/llmtest"
)

// TestTokenBudget: a client spends its own output-token budget with the
// test upstream: each call is charged its max_tokens up front and settled
// with the usage of its JSON body or stream as the body is read; a stream
// closed before its usage keeps the estimate; a reply beyond the budget
// puts the client in debt, so the next call does not fit its deadline and
// fails without being sent.
func TestTokenBudget(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "provider", Limits: []floodgate.Limit{floodgate.PerHour(1000)}})
	if err != nil {
		t.Fatal(err)
	}
	src, err := tokencost.New(tokencost.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		llmtest.Handler{}.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &outbound.TokenBudget{Limiter: lim, Tokens: src, Count: tokencost.Output, Key: func(*http.Request) string { return "provider" }}}
	left := func() int64 {
		res, err := lim.AllowN(t.Context(), "provider", 0)
		if err != nil {
			t.Fatal(err)
		}
		return res.Remaining
	}
	call := func(ctx context.Context, path, body string, hdr ...string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return client.Do(req)
	}
	read := func(path, body string, hdr ...string) {
		t.Helper()
		resp, err := call(t.Context(), path, body, hdr...)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	stream := `{"max_tokens":200,"stream":true,"stream_options":{"include_usage":true}}`
	read("/v1/chat/completions", `{"max_tokens":200}`, "Usage-Output", "30")
	if got := left(); got != 970 {
		t.Fatalf("after a JSON reply of 30: %d left, want 970", got)
	}
	read("/v1/messages", stream, "Usage-Output", "70")
	if got := left(); got != 900 {
		t.Fatalf("after a stream of 70: %d left, want 900", got)
	}
	// Charged up front: the estimate is out of the budget while the body
	// is being read.
	resp, err := call(t.Context(), "/v1/chat/completions", stream, "Usage-Output", "10")
	if err != nil {
		t.Fatal(err)
	}
	if got := left(); got != 700 {
		t.Fatalf("with a call in flight: %d left, want 700", got)
	}
	// Closed before its usage: the estimate stands.
	resp.Body.Close()
	if got := left(); got != 700 {
		t.Fatalf("after a stream closed unread: %d left, want 700", got)
	}
	read("/v1/messages", stream, "Usage-Output", "5000")
	before := sent.Load()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := call(ctx, "/v1/messages", `{"max_tokens":10}`); !errors.Is(err, outbound.ErrDeadline) || sent.Load() != before {
		t.Fatalf("in debt: %v (sent %d more); want ErrDeadline and nothing sent", err, sent.Load()-before)
	}
}
