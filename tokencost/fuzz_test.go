package tokencost

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
)

var (
	jsonHeader = http.Header{"Content-Type": {"application/json"}}
	sseHeader  = http.Header{"Content-Type": {"text/event-stream"}}
)

// reference is what encoding/json finds at usage.prompt_tokens of a JSON
// document: the count, and whether it is one the scanner believes.
func reference(doc []byte, maxUsage int64) (int64, bool) {
	// Maps, not a struct: encoding/json matches struct fields regardless
	// of case, JSON paths match keys exactly.
	var top, usage map[string]json.RawMessage
	if json.Unmarshal(doc, &top) != nil || json.Unmarshal(top["usage"], &usage) != nil {
		return 0, false
	}
	raw, ok := usage["prompt_tokens"]
	if !ok {
		return 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n > maxUsage {
		return 0, false
	}
	return n, true
}

// FuzzScan feeds any bytes, split anywhere, to the JSON and the SSE
// scanner: neither panics, a split never changes the answer, and a valid
// JSON document yields what encoding/json reads in it (for a document
// whose object keys are unique and unescaped, which is what the scanner
// compares).
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"prompt_tokens":12,"completion_tokens":3}}`,
		`{"usage":{"prompt_tokens":-1}}`,
		`{"usage":{"prompt_tokens":"12"},"x":[1,2,{"usage":{"prompt_tokens":5}}]}`,
		`[{"usage":{"prompt_tokens":12}}]`,
		"data: {\"usage\":{\"prompt_tokens\":12}}\n\ndata: [DONE]\n\n",
		"event: message_start\r\ndata: {\"message\":{\"usage\":{\"input_tokens\":4}}}\r\n\r\n",
		"data: {\"usage\":\ndata: {\"prompt_tokens\":7}}\n\n",
		`{"usage":{"prompt_tokens":1e3}}`,
		`{"a":"\"}","usage":{"prompt_tokens":8}}`,
	} {
		f.Add([]byte(s), uint16(3))
	}
	s, err := New(Settings{})
	if err != nil {
		f.Fatal(err)
	}
	one, err := New(Settings{Input: []string{"usage.prompt_tokens"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		for _, h := range []http.Header{jsonHeader, sseHeader} {
			whole := s.Begin(nil)
			whole.Observe(h, in)
			cut := s.Begin(nil)
			at := int(split) % (len(in) + 1)
			cut.Observe(h, in[:at])
			cut.Observe(h, in[at:])
			wi, wo, wt := whole.Usage()
			ci, co, ct := cut.Usage()
			if wi != ci || wo != co || wt != ct || whole.Cost(Total) != cut.Cost(Total) {
				t.Fatalf("split at %d changed the usage: %d %d %d, %d %d %d", at, wi, wo, wt, ci, co, ct)
			}
		}
		if !json.Valid(in) || bytes.Contains(in, []byte(`\`)) || dupKeys(in) {
			return
		}
		want, ok := reference(in, one.maxUsage)
		tl := one.Begin(nil)
		tl.Observe(jsonHeader, in)
		tl.end()
		if tl.known[slotInput] != ok || (ok && tl.count[slotInput] != want) {
			t.Fatalf("%s: scanner says %v %d, encoding/json %v %d", in, tl.known[slotInput], tl.count[slotInput], ok, want)
		}
	})
}

// dupKeys reports whether some object of doc repeats a key, where
// encoding/json and the scanner may take different ones.
func dupKeys(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		obj  bool
		key  bool // the next string is a key
		seen map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.obj && top.key
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{obj: v == '{', key: v == '{', seen: map[string]bool{}})
				continue
			}
			stack = stack[:len(stack)-1]
			continue
		case string:
			if isKey {
				if top.seen[v] {
					return true
				}
				top.seen[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.obj {
			top.key = true
		}
	}
}
