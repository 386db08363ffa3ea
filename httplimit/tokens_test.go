package httplimit_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/floodgate-go/floodgate/tokencost"
	"github.com/floodgate-go/floodgate/tokencost/llmtest"
)

// tokenEnv is the test upstream behind a middleware with an input and an
// output token budget per client.
type tokenEnv struct {
	in, out *floodgate.PolicyLimiter
	srv     *httptest.Server
}

func newTokenEnv(t *testing.T, cfg tokencost.Settings, next http.Handler) *tokenEnv {
	t.Helper()
	e := newEnv(t)
	src, err := tokencost.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	te := &tokenEnv{
		in:  e.limiter("input", floodgate.PerHour(1000)),
		out: e.limiter("output", floodgate.PerHour(2000)),
	}
	mw := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: te.in, Tokens: src, TokenCount: tokencost.Input},
		{Limiter: te.out, Tokens: src, TokenCount: tokencost.Output},
	}})
	te.srv = httptest.NewServer(mw.Handler(next))
	t.Cleanup(te.srv.Close)
	return te
}

// used returns the units the client's key has used of each budget.
func (te *tokenEnv) used(t *testing.T) (in, out int64) {
	t.Helper()
	ri, err1 := te.in.AllowN(t.Context(), "127.0.0.1", 0)
	ro, err2 := te.out.AllowN(t.Context(), "127.0.0.1", 0)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return 1000 - ri.Remaining, 2000 - ro.Remaining
}

func (te *tokenEnv) post(t *testing.T, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", te.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestTokens: each shape of both APIs through the middleware, and each
// misbehaviour of the upstream, with its documented charge: a count the
// response reports is charged, one it does not report in a way believed
// keeps its estimate (max_tokens for output, the body's size / 4 for
// input). The client gets the body unchanged.
func TestTokens(t *testing.T) {
	const openai, anthropic = "/v1/chat/completions", "/v1/messages"
	plain := `{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"hello there"}]}`
	stream := `{"model":"m","max_tokens":500,"stream":true,"stream_options":{"include_usage":true}}`
	est := func(body string) int64 { return int64(len(body)+3) / 4 }
	cases := []struct {
		name    string
		path    string
		body    string
		hdr     []string
		in, out int64
	}{
		{"openai json", openai, plain, []string{"Usage-Input", "25", "Usage-Output", "300"}, 25, 300},
		{"openai stream", openai, stream, []string{"Usage-Input", "25", "Usage-Output", "300"}, 25, 300},
		{"anthropic json", anthropic, plain, []string{"Usage-Input", "25", "Usage-Output", "300"}, 25, 300},
		{"anthropic stream", anthropic, stream, []string{"Usage-Input", "25", "Usage-Output", "300"}, 25, 300},
		{"openai stream cut before its usage chunk", openai, stream, []string{"Llmtest-Shape", "cut"}, est(stream), 500},
		{"anthropic stream cut before message_delta", anthropic, stream, []string{"Usage-Input", "25", "Llmtest-Shape", "cut"}, 25, 500},
		{"body not json", openai, plain, []string{"Llmtest-Shape", "text"}, est(plain), 500},
		{"huge body", openai, plain, []string{"Llmtest-Shape", "huge:300000"}, est(plain), 500},
		{"huge stream", anthropic, stream, []string{"Usage-Input", "25", "Llmtest-Shape", "huge:300000"}, 25, 500},
		{"negative usage", openai, plain, []string{"Usage-Output", "-300"}, 10, 500},
		{"absurd usage", openai, plain, []string{"Usage-Output", "1000000000000"}, 10, 500},
		{"non-integer usage", openai, plain, []string{"Usage-Output", "300.5"}, 10, 500},
		{"string usage", openai, plain, []string{"Usage-Output", `"300"`}, 10, 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			te := newTokenEnv(t, tokencost.Settings{MaxResponse: 200_000}, llmtest.Handler{})
			resp := te.post(t, c.path, c.body, c.hdr...)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d, %v", resp.StatusCode, err)
			}
			// The body is the upstream's, byte for byte.
			direct := httptest.NewRecorder()
			req := httptest.NewRequest("POST", c.path, strings.NewReader(c.body))
			for i := 0; i+1 < len(c.hdr); i += 2 {
				req.Header.Set(c.hdr[i], c.hdr[i+1])
			}
			llmtest.Handler{}.ServeHTTP(direct, req)
			if string(got) != direct.Body.String() {
				t.Fatalf("the client got %d bytes, the upstream sent %d", len(got), direct.Body.Len())
			}
			waitUsed(t, te, c.in, c.out)
		})
	}
}

// TestTokensDebt: a response that reports more than a budget holds puts
// the key in debt: the next request is refused until the budget has
// refilled for all of it.
func TestTokensDebt(t *testing.T) {
	te := newTokenEnv(t, tokencost.Settings{}, llmtest.Handler{})
	resp := te.post(t, "/v1/messages", `{"model":"m","max_tokens":100,"stream":true}`, "Usage-Output", "5000")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitUsed(t, te, 10, 2000)
	resp = te.post(t, "/v1/messages", `{"model":"m","max_tokens":100}`)
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Fatalf("after 5000 output tokens on a budget of 2000: %d, want 429", resp.StatusCode)
	}
	res, _ := te.out.AllowN(t.Context(), "127.0.0.1", 1)
	if res.Allowed || res.RetryAfter < floodgate.PerHour(2000).Period {
		t.Fatalf("%+v; want refused for more than an hour (3000 tokens of debt)", res)
	}
}

// TestTokensWeights: the model named in the request picks its weights, for
// the estimate and for the settlement.
func TestTokensWeights(t *testing.T) {
	te := newTokenEnv(t, tokencost.Settings{Weights: map[string]tokencost.Weight{
		"large": {Input: 2, Output: 3},
	}}, llmtest.Handler{})
	resp := te.post(t, "/v1/chat/completions", `{"model":"large","max_tokens":100}`, "Usage-Input", "40", "Usage-Output", "50")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitUsed(t, te, 80, 150)
}

// TestTokensStreamUnbuffered: each event reaches the client while the
// upstream still holds the rest of the stream: the middleware reads the
// stream as it passes and holds nothing back.
func TestTokensStreamUnbuffered(t *testing.T) {
	release := make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		http.NewResponseController(w).Flush()
		<-release // the client must have the first event by now
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	})
	te := newTokenEnv(t, tokencost.Settings{}, upstream)
	resp := te.post(t, "/v1/chat/completions", `{"max_tokens":100,"stream":true}`)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	io.Copy(io.Discard, br)
	resp.Body.Close()
	// The settlement runs after the handler returns, which may be after
	// the client read the last byte.
	waitUsed(t, te, 3, 4)
}

func waitUsed(t *testing.T, te *tokenEnv, in, out int64) {
	t.Helper()
	var i, o int64
	testkit.Eventually(t, 10*time.Second, "the settlement", func() bool {
		i, o = te.used(t)
		return i == in && o == out
	})
}
