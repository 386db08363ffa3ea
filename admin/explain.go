package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/floodgate-go/floodgate/internal/webguard"
)

// An ExplainRequest describes a request to explain: exactly one of HTTP (a
// request to the reverse proxy), Postgres (a client of the PostgreSQL
// proxy) and Envoy (a ShouldRateLimit call).
type ExplainRequest struct {
	HTTP     *HTTPRequest     `json:"http,omitempty"`
	Postgres *PostgresClient  `json:"postgres,omitempty"`
	Envoy    *EnvoyDescriptor `json:"envoy,omitempty"`
}

// An HTTPRequest is a request as the proxy would receive it.
type HTTPRequest struct {
	Method  string              `json:"method"`         // default GET
	URL     string              `json:"url"`            // the path and query, e.g. /api/items?id=1
	Host    string              `json:"host,omitempty"` // the Host header; default the proxy's listen address
	Headers map[string][]string `json:"headers,omitempty"`
	Peer    string              `json:"peer,omitempty"` // the connection's peer, ADDRESS or ADDRESS:PORT; default 127.0.0.1
}

// A PostgresClient is a client of the PostgreSQL proxy.
type PostgresClient struct {
	User string `json:"user"`
	Peer string `json:"peer,omitempty"` // the client's address (after any PROXY header); default 127.0.0.1
}

// An EnvoyDescriptor is a ShouldRateLimit call: its domain and
// descriptors, each a list of key/value entries.
type EnvoyDescriptor struct {
	Domain      string         `json:"domain"`
	Descriptors [][]EnvoyEntry `json:"descriptors"`
	HitsAddend  int64          `json:"hits_addend,omitempty"` // the call's cost; 0 means 1
}

// An EnvoyEntry is one entry of a descriptor.
type EnvoyEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// An Explanation says what a front end would do with a described
// request: which route or rule matched and why the others did not, the
// keys it would check, the limits that apply to each and each key's state
// now. Nothing is charged.
type Explanation struct {
	Front    string   `json:"front"`              // proxy, postgres or envoy
	Redirect string   `json:"redirect,omitempty"` // the proxy first redirects (308) to this clean path
	Routes   []Route  `json:"routes,omitempty"`   // the proxy's routes up to the one that matched; Envoy's descriptors
	Checks   []Step   `json:"checks"`             // what would be checked, in order
	Notes    []string `json:"notes,omitempty"`    // what else the front end does with the request
}

// A Route is one route's (or Envoy descriptor's) verdict on the request.
type Route struct {
	Name    string `json:"name"`
	Match   string `json:"match,omitempty"`
	Matched bool   `json:"matched"`
	Why     string `json:"why,omitempty"` // why it did not match
	Shadow  bool   `json:"shadow,omitempty"`
}

// A Step is one limit the request would be checked against.
type Step struct {
	Where  string    `json:"where"` // the route's limit, the descriptor or the scope it comes from
	Policy string    `json:"policy,omitempty"`
	Key    string    `json:"key,omitempty"`
	Cost   int64     `json:"cost"`
	Skip   string    `json:"skip,omitempty"` // why the limit leaves the request alone
	Shadow bool      `json:"shadow,omitempty"`
	State  *KeyState `json:"state,omitempty"`
	Error  string    `json:"error,omitempty"` // the engine did not answer the peek
}

// ErrExplain marks an ExplainRequest that cannot be explained (no front
// end for it, a malformed description): a 400, not a 500.
var ErrExplain = errors.New("explain")

func explainHandler(explain func(context.Context, *ExplainRequest) (*Explanation, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req ExplainRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "the body is not an explain request: "+err.Error()+
				`; send e.g. {"http":{"method":"GET","url":"/api/items","headers":{"X-Api-Key":["k1"]},"peer":"203.0.113.7"}}`)
			return
		}
		n := 0
		for _, set := range []bool{req.HTTP != nil, req.Postgres != nil, req.Envoy != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			writeError(w, http.StatusBadRequest, "describe exactly one of http, postgres and envoy")
			return
		}
		ex, err := explain(r.Context(), &req)
		if err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, ErrExplain) {
				status = http.StatusBadRequest
			}
			writeError(w, status, err.Error())
			return
		}
		webguard.WriteJSON(w, http.StatusOK, ex)
	})
}
