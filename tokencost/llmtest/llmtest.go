// Package llmtest is an upstream for tests that answers as OpenAI's Chat
// Completions API (any path but /v1/messages) and Anthropic's Messages API
// (/v1/messages) do, with JSON bodies and server-sent event streams, and
// misbehaves on request.
//
// The request body's model, stream and stream_options.include_usage are
// read as the APIs read them. What the answer reports and how is set per
// request with header fields:
//
//   - Usage-Input, Usage-Output: the token counts reported (default 10 and
//     20); the value is written into the JSON as it is, so "-5", "1e30",
//     "12.5" or "\"300\"" make a usage field that lies.
//   - Llmtest-Shape: "cut" ends a stream (or a JSON body) before its usage;
//     "text" answers a body that is not JSON; "huge:N" pads the answer with
//     N bytes of content before its usage.
//   - Llmtest-Chunks: the number of content chunks of a stream (default 3);
//     Llmtest-Gap: a time.Duration slept between them (default none).
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Handler is the upstream.
type Handler struct{}

type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req request
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req) // a body that is not JSON asks for the defaults
	in, out := r.Header.Get("Usage-Input"), r.Header.Get("Usage-Output")
	if in == "" {
		in = "10"
	}
	if out == "" {
		out = "20"
	}
	shape := r.Header.Get("Llmtest-Shape")
	pad := 0
	if n, ok := strings.CutPrefix(shape, "huge:"); ok {
		pad, _ = strconv.Atoi(n)
	}
	chunks := 3
	if n, err := strconv.Atoi(r.Header.Get("Llmtest-Chunks")); err == nil {
		chunks = n
	}
	gap, _ := time.ParseDuration(r.Header.Get("Llmtest-Gap"))
	anthropic := r.URL.Path == "/v1/messages"
	if shape == "text" {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "upstream says hello\n")
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		content := strings.Repeat("x", pad)
		var usage string
		if anthropic {
			usage = fmt.Sprintf(`"usage":{"input_tokens":%s,"output_tokens":%s}`, in, out)
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"hi %s"}],"stop_reason":"end_turn",`, req.Model, content)
		} else {
			usage = fmt.Sprintf(`"usage":{"prompt_tokens":%s,"completion_tokens":%s,"total_tokens":%s}`, in, out, sum(in, out))
			fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi %s"},"finish_reason":"stop"}],`, req.Model, content)
		}
		if shape == "cut" {
			return
		}
		io.WriteString(w, usage+"}\n")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f := http.NewResponseController(w)
	event := func(name, data string) {
		if name != "" {
			fmt.Fprintf(w, "event: %s\n", name)
		}
		fmt.Fprintf(w, "data: %s\n\n", data)
		f.Flush()
	}
	if anthropic {
		event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":%q,"usage":{"input_tokens":%s,"output_tokens":1}}}`, req.Model, in))
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	}
	if pad > 0 {
		data := strings.Repeat("x", pad)
		if anthropic {
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+data+`"}}`)
		} else {
			event("", `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"`+data+`"}}],"usage":null}`)
		}
	}
	for i := range chunks {
		if i > 0 && gap > 0 {
			time.Sleep(gap)
		}
		if anthropic {
			event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok%d "}}`, i))
		} else {
			event("", fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":%q,"choices":[{"index":0,"delta":{"content":"tok%d "}}],"usage":null}`, req.Model, i))
		}
	}
	if shape == "cut" {
		return
	}
	if anthropic {
		event("content_block_stop", `{"type":"content_block_stop","index":0}`)
		event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%s}}`, out))
		event("message_stop", `{"type":"message_stop"}`)
		return
	}
	if req.StreamOptions.IncludeUsage {
		event("", fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":%q,"choices":[],"usage":{"prompt_tokens":%s,"completion_tokens":%s,"total_tokens":%s}}`, req.Model, in, out, sum(in, out)))
	}
	event("", "[DONE]")
}

// sum is in+out when both are integers, else in (a lie stays a lie).
func sum(in, out string) string {
	a, err1 := strconv.ParseInt(in, 10, 64)
	b, err2 := strconv.ParseInt(out, 10, 64)
	if err1 != nil || err2 != nil {
		return in
	}
	return strconv.FormatInt(a+b, 10)
}
