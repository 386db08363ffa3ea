package tokencost

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// A Count is which of a request's token counts a limit is charged.
type Count uint8

const (
	// Total charges input and output tokens together, each at its
	// weight. It is the default.
	Total Count = iota
	// Input charges the prompt's tokens (OpenAI's prompt_tokens,
	// Anthropic's and the Responses API's input_tokens).
	Input
	// Output charges the generated tokens (completion_tokens,
	// output_tokens).
	Output
)

func (c Count) String() string {
	switch c {
	case Input:
		return "input"
	case Output:
		return "output"
	}
	return "total"
}

// ParseCount parses "input", "output" or "total" ("" is total).
func ParseCount(s string) (Count, error) {
	switch s {
	case "", "total":
		return Total, nil
	case "input":
		return Input, nil
	case "output":
		return Output, nil
	}
	return Total, fmt.Errorf("tokencost: unknown count %q; use input, output or total", s)
}

// A Weight is what one token of a model costs in units of a limit: a
// model that costs four times as much per output token has Output 4.
type Weight struct {
	// Input is the units of one input token. 0 (or absent) means 1, so
	// that a table that names only an output weight leaves input tokens
	// charged.
	Input float64 `yaml:"input,omitempty"`
	// Output is the units of one output token. 0 (or absent) means 1.
	Output float64 `yaml:"output,omitempty"`
}

// Defaults of Settings' zero fields.
const (
	// DefaultEstimate is the output tokens a request is charged up front
	// when its body names no bound (max_tokens, max_output_tokens,
	// max_completion_tokens).
	DefaultEstimate = 1024
	// DefaultMaxRequest is the most bytes of a request body read for its
	// model and output bound.
	DefaultMaxRequest = 1 << 20
	// DefaultMaxResponse is the most bytes of a response body scanned for
	// its usage; the rest passes unread.
	DefaultMaxResponse = 64 << 20
	// DefaultMaxUsage is the largest token count a response may report;
	// a larger one is not believed.
	DefaultMaxUsage = 10_000_000
	// BytesPerToken is how many bytes of a request body the input estimate
	// counts as one token.
	BytesPerToken = 4
)

// The paths read when Settings name none: OpenAI's Chat Completions and
// Responses APIs and Anthropic's Messages API, as JSON bodies and as the
// events of their streams (OpenAI's final chunk with
// stream_options.include_usage, the Responses API's response.completed,
// Anthropic's message_start and message_delta).
var (
	DefaultInput  = []string{"usage.prompt_tokens", "usage.input_tokens", "message.usage.input_tokens", "response.usage.input_tokens"}
	DefaultOutput = []string{"usage.completion_tokens", "usage.output_tokens", "response.usage.output_tokens"}
	DefaultTotal  = []string{"usage.total_tokens", "response.usage.total_tokens"}
	DefaultBound  = []string{"max_tokens", "max_output_tokens", "max_completion_tokens"}
)

// Settings configure a Source. The zero value reads OpenAI's and
// Anthropic's shapes, every model weighing 1.
type Settings struct {
	// Input are the JSON paths (keys joined by dots, through objects only)
	// of the input token count in the response body or in an event of its
	// stream; the last value reported stands. Absent: usage.prompt_tokens,
	// usage.input_tokens, message.usage.input_tokens,
	// response.usage.input_tokens.
	Input []string `yaml:"input,omitempty"`

	// Output are the paths of the output token count. Absent:
	// usage.completion_tokens, usage.output_tokens,
	// response.usage.output_tokens.
	Output []string `yaml:"output,omitempty"`

	// Total are the paths of a total, charged (at the larger weight) only
	// when neither count is reported. Absent: usage.total_tokens,
	// response.usage.total_tokens.
	Total []string `yaml:"total,omitempty"`

	// Model is the path of the model's name in the request body, which
	// picks its weights. Default "model".
	Model string `yaml:"model,omitempty"`

	// Bound are the paths of the request's bound on output tokens; the
	// first found is the output estimate. Absent: max_tokens,
	// max_output_tokens, max_completion_tokens.
	Bound []string `yaml:"bound,omitempty"`

	// Estimate is the output tokens charged up front when the request
	// names no bound. Default 1024.
	Estimate int64 `yaml:"estimate,omitempty"`

	// InputEstimate is the input tokens charged up front. Default: the
	// request body's bytes divided by 4 (at least 1).
	InputEstimate int64 `yaml:"input_estimate,omitempty"`

	// Weights are the units one token of a model costs, by the model's
	// name in the request; the entry "*" weighs every model not listed. A
	// model in neither weighs 1 and 1.
	Weights map[string]Weight `yaml:"weights,omitempty"`

	// MaxRequest is the most bytes of the request body read for its model
	// and bound (they are passed on whole); a bound further in is not
	// seen. Default 1048576.
	MaxRequest int64 `yaml:"max_request,omitempty"`

	// MaxResponse is the most bytes of a response body scanned for its
	// usage; the rest passes unread, and a count not reported before it
	// keeps its estimate. Default 67108864.
	MaxResponse int64 `yaml:"max_response,omitempty"`

	// MaxUsage is the largest count a response may report; a larger one
	// is not believed (the estimate stands). Default 10000000.
	MaxUsage int64 `yaml:"max_usage,omitempty"`
}

// The slots of a scanner's values.
const (
	slotInput = iota
	slotOutput
	slotTotal
	slotModel
	slotBound // then one per Bound path, in order
)

// A Source reads the token counts of LLM API requests: estimates from the
// request, usage from the response body or stream. It is safe for
// concurrent use; each request has a Tally of its own.
type Source struct {
	resp       []path
	req        []path
	reqSlots   int
	estimate   int64
	inEstimate int64
	weights    map[string]Weight
	star       Weight
	maxReq     int64
	maxResp    int64
	maxUsage   int64
}

// ErrInvalidConfig is wrapped by the errors of New.
var ErrInvalidConfig = errors.New("tokencost: invalid config")

// New validates cfg and returns its Source.
func New(cfg Settings) (*Source, error) {
	s := &Source{
		estimate:   cmpOr(cfg.Estimate, DefaultEstimate),
		inEstimate: cfg.InputEstimate,
		maxReq:     cmpOr(cfg.MaxRequest, DefaultMaxRequest),
		maxResp:    cmpOr(cfg.MaxResponse, DefaultMaxResponse),
		maxUsage:   cmpOr(cfg.MaxUsage, DefaultMaxUsage),
		star:       Weight{1, 1},
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if cfg.Estimate < 0 || cfg.InputEstimate < 0 || cfg.MaxRequest < 0 || cfg.MaxResponse < 0 || cfg.MaxUsage < 0 {
		bad("estimates and bounds must not be negative")
	}
	add := func(dst *[]path, ps, def []string, slot int, what string) {
		if ps == nil {
			ps = def
		}
		for _, p := range ps {
			keys := strings.Split(p, ".")
			if p == "" || len(keys) > maxPathDepth || len(p) > maxPathDepth*maxKey || hasEmpty(keys) {
				bad("%s path %q: use keys joined by dots, at most %d deep", what, p, maxPathDepth)
				continue
			}
			*dst = append(*dst, path{keys: keys, slot: slot})
		}
	}
	add(&s.resp, cfg.Input, DefaultInput, slotInput, "input")
	add(&s.resp, cfg.Output, DefaultOutput, slotOutput, "output")
	add(&s.resp, cfg.Total, DefaultTotal, slotTotal, "total")
	model := cfg.Model
	if model == "" {
		model = "model"
	}
	add(&s.req, []string{model}, nil, slotModel, "model")
	bound := cfg.Bound
	if bound == nil {
		bound = DefaultBound
	}
	for i, b := range bound {
		add(&s.req, []string{b}, nil, slotBound+i, "bound")
	}
	s.reqSlots = slotBound + len(bound)
	s.weights = make(map[string]Weight, len(cfg.Weights))
	for m, w := range cfg.Weights {
		if !(w.Input >= 0 && w.Output >= 0) || math.IsInf(w.Input, 0) || math.IsInf(w.Output, 0) {
			bad("weight of model %q: weights are finite numbers of 0 or more", m)
		}
		if w.Input == 0 {
			w.Input = 1
		}
		if w.Output == 0 {
			w.Output = 1
		}
		s.weights[m] = w
	}
	if w, ok := s.weights["*"]; ok {
		s.star = w
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func hasEmpty(keys []string) bool {
	for _, k := range keys {
		if k == "" || len(k) > maxKey {
			return true
		}
	}
	return false
}

func cmpOr(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// A Tally is the token count of one request: estimated from its body when
// it begins, settled from its response as the body passes. Its methods
// are not safe for concurrent use.
type Tally struct {
	src        *Source
	model      string
	w          Weight
	estIn      int64
	estOut     int64
	known      [3]bool
	count      [3]int64
	mode       uint8
	seen       int64
	sse        sseScan // sse.json scans a plain JSON body too
	ended      bool
	bodyBytes  int64
	boundFound bool
}

// The modes of a Tally's response scan.
const (
	modeUnset = iota
	modeJSON
	modeSSE
	modeOff
)

// Begin reads r's body, at most the Source's MaxRequest bytes of it, for
// the model and the output bound, and leaves r's body as it was: what was
// read is put back in front of the rest (or, when r has GetBody, the body
// is read from a copy). A body that is not JSON, or too long to reach its
// fields, leaves them unknown: the model weighs as "*", the output
// estimate is Settings.Estimate.
func (s *Source) Begin(r *http.Request) *Tally {
	t := &Tally{src: s, estOut: s.estimate}
	var sc jsonScan
	sc.init(s.req, s.reqSlots)
	if r != nil && r.Body != nil && r.Body != http.NoBody {
		buf := s.read(r)
		t.bodyBytes = int64(len(buf))
		sc.write(buf)
		if sc.end() {
			t.request(sc.pending)
		}
	}
	if t.estIn = s.inEstimate; t.estIn == 0 {
		t.estIn = max(1, (t.bodyBytes+BytesPerToken-1)/BytesPerToken)
	}
	t.w = s.weight(t.model)
	return t
}

// read returns the first bytes of r's body and puts them back.
func (s *Source) read(r *http.Request) []byte {
	if r.GetBody != nil {
		if body, err := r.GetBody(); err == nil {
			defer body.Close()
			buf, _ := io.ReadAll(io.LimitReader(body, s.maxReq))
			return buf
		}
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, s.maxReq))
	orig := r.Body
	rest := io.Reader(orig)
	if err != nil {
		rest = errReader{err}
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), rest), orig}
	return buf
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// request takes the model and the bound from a request's values.
func (t *Tally) request(v []lit) {
	if m := &v[slotModel]; m.kind == litString {
		t.model = m.text()
	}
	for i := slotBound; i < len(v); i++ {
		if n, ok := t.src.number(&v[i]); ok {
			t.estOut, t.boundFound = n, true
			return
		}
	}
}

// number parses a reported count: a JSON integer from 0 to MaxUsage
// written without fraction or exponent.
func (s *Source) number(l *lit) (int64, bool) {
	if l.kind != litNumber || l.n == 0 || l.n > 19 {
		return 0, false
	}
	for _, c := range l.b[:l.n] {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(l.text(), 10, 64)
	if err != nil || n > s.maxUsage {
		return 0, false
	}
	return n, true
}

func (s *Source) weight(model string) Weight {
	if w, ok := s.weights[model]; ok && model != "" {
		return w
	}
	return s.star
}

// Model returns the model named by the request, "" when none was found.
func (t *Tally) Model() string { return t.model }

// Observe scans p, the next bytes of the response body; h is the
// response's header, whose Content-Type says how the body is read the
// first time: text/event-stream as server-sent events, each event's data a
// JSON document; anything else as one JSON document.
func (t *Tally) Observe(h http.Header, p []byte) {
	if t.mode == modeUnset {
		t.start(h)
	}
	if t.mode == modeOff || len(p) == 0 {
		return
	}
	if rest := t.src.maxResp - t.seen; int64(len(p)) > rest {
		p = p[:rest]
		t.mode = modeOff
		t.sse.json.fail() // the document in progress is cut: it reports nothing
	}
	t.seen += int64(len(p))
	if t.mode == modeJSON {
		t.sse.json.write(p)
		return
	}
	t.sse.write(p)
}

func (t *Tally) start(h http.Header) {
	t.mode = modeJSON
	t.sse.json.init(t.src.resp, slotModel)
	t.sse.commit = t.commit
	if ct, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && ct == "text/event-stream" {
		t.mode = modeSSE
	}
}

// commit takes the counts of a complete document: the last value reported
// for a count stands; one that is not a whole number from 0 to MaxUsage
// makes the count unknown again.
func (t *Tally) commit(v []lit) {
	for i := range t.count {
		if v[i].kind == litNone {
			continue
		}
		t.count[i], t.known[i] = t.src.number(&v[i])
	}
}

// end ends the response: a JSON body's counts are taken if it is complete.
func (t *Tally) end() {
	if t.ended {
		return
	}
	t.ended = true
	if t.mode == modeJSON && t.sse.json.end() {
		t.commit(t.sse.json.pending)
	}
}

// Usage returns the token counts the response reported, -1 for each it
// did not (yet) report in a way believed.
func (t *Tally) Usage() (input, output, total int64) {
	u := [3]int64{-1, -1, -1}
	for i := range u {
		if t.known[i] {
			u[i] = t.count[i]
		}
	}
	return u[slotInput], u[slotOutput], u[slotTotal]
}

// Estimate returns the units charged up front for c: the input estimate,
// the output bound (or Settings.Estimate), or both, at the model's weights.
func (t *Tally) Estimate(c Count) int64 {
	in, out := units(t.estIn, t.w.Input), units(t.estOut, t.w.Output)
	switch c {
	case Input:
		return in
	case Output:
		return out
	}
	return sat(in + out)
}

// Cost returns the units c costs once the response has ended (Cost ends
// it: call it after the last Observe): each count the response reported
// at its weight, and its estimate for each it did not. A response that
// reports only a total is charged the total at the larger weight for
// Total, and the estimates for Input and Output.
func (t *Tally) Cost(c Count) int64 {
	t.end()
	in, out := units(t.estIn, t.w.Input), units(t.estOut, t.w.Output)
	if t.known[slotInput] {
		in = units(t.count[slotInput], t.w.Input)
	}
	if t.known[slotOutput] {
		out = units(t.count[slotOutput], t.w.Output)
	}
	switch c {
	case Input:
		return in
	case Output:
		return out
	}
	if !t.known[slotInput] && !t.known[slotOutput] && t.known[slotTotal] {
		return units(t.count[slotTotal], max(t.w.Input, t.w.Output))
	}
	return sat(in + out)
}

// units is n tokens at weight w, rounded up.
func units(n int64, w float64) int64 {
	if w == 1 {
		return n
	}
	f := math.Ceil(float64(n) * w)
	if f >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(f)
}

func sat(n int64) int64 {
	if n < 0 || n > math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return n
}
