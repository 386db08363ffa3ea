package tokencost

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/tokencost/llmtest"
)

// run sends body to the test upstream at path with header fields hdr, feeds
// the response to a Tally of s in pieces of the given size and returns the
// Tally and the body the client got.
func run(t *testing.T, s *Source, urlPath, body string, hdr map[string]string, piece int) (*Tally, string) {
	t.Helper()
	srv := httptest.NewServer(llmtest.Handler{})
	t.Cleanup(srv.Close)
	req, err := http.NewRequest("POST", srv.URL+urlPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	tl := s.Begin(req)
	if got, _ := io.ReadAll(req.Body); string(got) != body {
		t.Fatalf("request body after Begin %q, want %q", got, body)
	}
	req.Body = io.NopCloser(strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for p := all; len(p) > 0; {
		n := min(piece, len(p))
		tl.Observe(resp.Header, p[:n])
		p = p[n:]
	}
	return tl, string(all)
}

func mustNew(t *testing.T, cfg Settings) *Source {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestUsage: each shape of both APIs, and each misbehaviour, with the
// charge it is documented to get: the counts reported where they are
// believed, the estimate (max_tokens for output, the body's bytes / 4 for
// input) where they are not.
func TestUsage(t *testing.T) {
	s := mustNew(t, Settings{MaxResponse: 1 << 20})
	const openai, anthropic = "/v1/chat/completions", "/v1/messages"
	plain := `{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`
	stream := `{"model":"m","max_tokens":500,"stream":true,"stream_options":{"include_usage":true}}`
	noUsage := `{"model":"m","max_tokens":500,"stream":true}`
	inEst := func(body string) int64 { return int64((len(body) + 3) / 4) }
	cases := []struct {
		name      string
		path      string
		body      string
		hdr       map[string]string
		in, out   int64 // the charges of Input and Output
		reportsIn bool
	}{
		{"openai json", openai, plain, nil, 10, 20, true},
		{"openai stream with usage", openai, stream, map[string]string{"Usage-Input": "7", "Usage-Output": "900"}, 7, 900, true},
		{"openai stream without include_usage", openai, noUsage, nil, inEst(noUsage), 500, false},
		{"openai stream cut before usage", openai, stream, map[string]string{"Llmtest-Shape": "cut"}, inEst(stream), 500, false},
		{"anthropic json", anthropic, plain, map[string]string{"Usage-Input": "30", "Usage-Output": "40"}, 30, 40, true},
		{"anthropic stream", anthropic, stream, map[string]string{"Usage-Input": "30", "Usage-Output": "40"}, 30, 40, true},
		{"anthropic stream cut before message_delta", anthropic, stream, map[string]string{"Usage-Input": "30", "Llmtest-Shape": "cut"}, 30, 500, true},
		{"json cut before usage", openai, plain, map[string]string{"Llmtest-Shape": "cut"}, inEst(plain), 500, false},
		{"body not json", openai, plain, map[string]string{"Llmtest-Shape": "text"}, inEst(plain), 500, false},
		{"huge json body", openai, plain, map[string]string{"Llmtest-Shape": "huge:2000000"}, inEst(plain), 500, false},
		{"huge stream event", openai, stream, map[string]string{"Llmtest-Shape": "huge:2000000"}, inEst(stream), 500, false},
		{"negative", openai, plain, map[string]string{"Usage-Output": "-5"}, 10, 500, true},
		{"absurd", openai, plain, map[string]string{"Usage-Output": "99999999999"}, 10, 500, true},
		{"exponent", openai, plain, map[string]string{"Usage-Output": "1e3"}, 10, 500, true},
		{"fraction", openai, plain, map[string]string{"Usage-Output": "12.5"}, 10, 500, true},
		{"string", openai, plain, map[string]string{"Usage-Output": `"300"`}, 10, 500, true},
		{"null", openai, plain, map[string]string{"Usage-Output": `null`}, 10, 500, true},
		{"request not json", openai, "hello", nil, 10, 20, true},
	}
	for _, c := range cases {
		for _, piece := range []int{1, 7, 1 << 20} {
			tl, _ := run(t, s, c.path, c.body, c.hdr, piece)
			if got := tl.Cost(Input); got != c.in {
				t.Errorf("%s (pieces of %d): input %d, want %d", c.name, piece, got, c.in)
			}
			if got := tl.Cost(Output); got != c.out {
				t.Errorf("%s (pieces of %d): output %d, want %d", c.name, piece, got, c.out)
			}
			if in, _, _ := tl.Usage(); (in >= 0) != c.reportsIn {
				t.Errorf("%s: input reported %d", c.name, in)
			}
		}
	}
}

// TestEstimate: the output bound from each field, the configured estimate
// without one, weights by model.
func TestEstimate(t *testing.T) {
	s := mustNew(t, Settings{Estimate: 77, InputEstimate: 5, Weights: map[string]Weight{
		"big": {Input: 2, Output: 8},
		"*":   {Input: 1, Output: 1.5},
	}})
	cases := []struct {
		body    string
		in, out int64
		model   string
	}{
		{`{"model":"big","max_tokens":100}`, 10, 800, "big"},
		{`{"model":"big","max_output_tokens":3}`, 10, 24, "big"},
		{`{"max_completion_tokens":10,"model":"other"}`, 5, 15, "other"},
		{`{"model":"big"}`, 10, 616, "big"},
		{`{"model":"big","max_tokens":-1}`, 10, 616, "big"},
		{`{"model":"big","max_tokens":"9"}`, 10, 616, "big"},
		{`{"model":"big","max_tokens":100`, 5, 116, ""}, // not JSON: nothing believed
		{``, 5, 116, ""},
	}
	for _, c := range cases {
		req := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		tl := s.Begin(req)
		if tl.Model() != c.model || tl.Estimate(Input) != c.in || tl.Estimate(Output) != c.out || tl.Estimate(Total) != c.in+c.out {
			t.Errorf("%s: model %q in %d out %d total %d, want %q %d %d", c.body, tl.Model(), tl.Estimate(Input), tl.Estimate(Output), tl.Estimate(Total), c.model, c.in, c.out)
		}
		// Without a response the estimate stands.
		if tl.Cost(Total) != c.in+c.out {
			t.Errorf("%s: cost %d without a response", c.body, tl.Cost(Total))
		}
	}
}

// TestRequestBodyBound: a body longer than MaxRequest is read only so far,
// and passed on whole.
func TestRequestBodyBound(t *testing.T) {
	s := mustNew(t, Settings{MaxRequest: 64})
	body := `{"messages":"` + strings.Repeat("y", 1000) + `","max_tokens":9}`
	req := httptest.NewRequest("POST", "/", strings.NewReader(body))
	tl := s.Begin(req)
	if got, _ := io.ReadAll(req.Body); string(got) != body {
		t.Fatalf("body not restored: %d bytes", len(got))
	}
	if tl.Estimate(Output) != DefaultEstimate || tl.Estimate(Input) != 16 {
		t.Fatalf("estimates %d %d", tl.Estimate(Input), tl.Estimate(Output))
	}
}

func TestTotalOnly(t *testing.T) {
	s := mustNew(t, Settings{Input: []string{}, Output: []string{}, Total: []string{"meta.tokens"}, Weights: map[string]Weight{"*": {Input: 1, Output: 3}}})
	tl := s.Begin(httptest.NewRequest("POST", "/", strings.NewReader(`{"max_tokens":10}`)))
	tl.Observe(http.Header{"Content-Type": {"application/json"}}, []byte(`{"meta":{"tokens":100}}`))
	if got := tl.Cost(Total); got != 300 {
		t.Fatalf("total %d, want 300", got)
	}
}

func TestSettingsErrors(t *testing.T) {
	for _, cfg := range []Settings{
		{Estimate: -1},
		{Input: []string{"usage..x"}},
		{Output: []string{""}},
		{Weights: map[string]Weight{"m": {Input: -1}}},
		{Total: []string{"a.b.c.d.e.f.g.h.i"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestObserveAllocates: scanning a body holds nothing of it: a piece of a
// huge string or of a stream costs no allocation, so memory stays the
// Tally's own whatever the body's size.
func TestObserveAllocates(t *testing.T) {
	s := mustNew(t, Settings{})
	piece := []byte(strings.Repeat("x", 32<<10))
	for _, c := range []struct {
		h    http.Header
		head string
	}{
		{http.Header{"Content-Type": {"application/json"}}, `{"choices":[{"message":{"content":"`},
		{http.Header{"Content-Type": {"text/event-stream"}}, `data: {"choices":[{"delta":{"content":"`},
	} {
		tl := s.Begin(nil)
		tl.Observe(c.h, []byte(c.head))
		if n := testing.AllocsPerRun(100, func() { tl.Observe(c.h, piece) }); n != 0 {
			t.Errorf("%s: %v allocations per 32 KiB piece", c.h.Get("Content-Type"), n)
		}
	}
}
