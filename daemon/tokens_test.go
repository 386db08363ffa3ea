package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testkit"
	"github.com/floodgate-go/floodgate/tokencost/llmtest"
)

// An LLM gateway: per-user input and output token budgets in front of an
// upstream that speaks OpenAI's and Anthropic's JSON and event streams.
// Each call is charged its estimate up front and settled with the usage
// its response reports, as it streams through; what the upstream does not
// report in a way believed keeps the estimate; more than a budget holds
// puts the user in debt; other users are not touched.
func TestTokenBudgets(t *testing.T) {
	up := newUpstream(t, llmtest.Handler{})
	d := started(t, fmt.Sprintf(`
policies:
  input: {rate: 100000/h}
  output: {rate: 1000/h}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  user_trusted_from: [127.0.0.1/32]
  routes:
    - name: llm
      match: {path_prefix: /v1/}
      limits:
        - {policy: input, key: user:X-User, cost: tokens:input}
        - {policy: output, key: user:X-User, cost: tokens:output}
      tokens:
        weights:
          big: {output: 2}
`, up))
	base := "http://" + d.Addrs().Proxy.String()
	call := func(user, path, body string, hdr ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("POST", base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", user)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// left is the output budget a user has: a call with no output bound
	// and no output usage costs nothing there, and shows it.
	left := func(user string) int {
		resp := call(user, "/v1/chat/completions", `{"max_tokens":0}`, "Usage-Output", "0", "Usage-Input", "0")
		n, err := strconv.Atoi(resp.Header.Get("X-Ratelimit-Remaining"))
		if err != nil {
			t.Fatalf("no remaining: %v", resp.Header)
		}
		return n
	}
	settled := func(user string, want int) {
		t.Helper()
		var got int
		testkit.Eventually(t, 10*time.Second, "the settlement", func() bool {
			got = left(user)
			return got == want
		})
	}
	stream := `{"model":"big","max_tokens":50,"stream":true,"stream_options":{"include_usage":true}}`
	// 30 output tokens at weight 2.
	call("alice", "/v1/chat/completions", stream, "Usage-Output", "30")
	settled("alice", 1000-60)
	call("alice", "/v1/messages", stream, "Usage-Output", "30")
	settled("alice", 1000-120)
	// Cut before its usage: the estimate, 50 at weight 2, stands.
	call("alice", "/v1/chat/completions", stream, "Llmtest-Shape", "cut")
	settled("alice", 1000-220)
	// A body that is not JSON, and a usage that lies: the estimate again.
	call("alice", "/v1/chat/completions", `{"model":"big","max_tokens":50}`, "Llmtest-Shape", "text")
	settled("alice", 1000-320)
	call("alice", "/v1/chat/completions", `{"model":"big","max_tokens":50}`, "Usage-Output", "-7")
	settled("alice", 1000-420)
	// A reply far beyond the budget: alice is in debt, bob is not.
	call("alice", "/v1/messages", `{"model":"other","max_tokens":50}`, "Usage-Output", "5000")
	testkit.Eventually(t, 10*time.Second, "alice in debt", func() bool {
		return call("alice", "/v1/messages", `{"max_tokens":1}`).StatusCode == http.StatusTooManyRequests
	})
	if got := left("bob"); got != 1000 {
		t.Fatalf("bob has %d left, want 1000", got)
	}
}
