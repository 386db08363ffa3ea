package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
)

// multiFlag is a flag given any number of times.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// description holds the flags that describe a request to explain, shared
// by floodgate explain and floodgate key show.
type description struct {
	http, host, peer, pgUser, domain string
	headers, descriptors             multiFlag
	hits                             int64
}

func (d *description) flags(fs *flag.FlagSet) {
	fs.StringVar(&d.http, "http", "", "an HTTP `request` to the proxy: \"METHOD /path?query\" or \"METHOD URL\" (just the path or URL: GET)")
	fs.StringVar(&d.host, "host", "", "the HTTP request's `Host`")
	fs.Var(&d.headers, "H", "an HTTP request `header` \"Name: value\" (repeat for more)")
	fs.StringVar(&d.peer, "peer", "", "the client's `address` as the front end sees it (the connection's peer); default 127.0.0.1")
	fs.StringVar(&d.pgUser, "pg-user", "", "a PostgreSQL `user` connecting through the PostgreSQL proxy")
	fs.StringVar(&d.domain, "envoy-domain", "", "an Envoy ShouldRateLimit call's `domain`")
	fs.Var(&d.descriptors, "descriptor", "one of the Envoy call's descriptors, `k=v,k2=v2` (repeat for more)")
	fs.Int64Var(&d.hits, "hits", 0, "the Envoy call's hits_addend (`units`); 0 means 1")
}

// given reports whether any request was described.
func (d *description) given() bool { return d.http != "" || d.pgUser != "" || d.domain != "" }

// request is the described request, or a usage error.
func (d *description) request() (*admin.ExplainRequest, error) {
	n := 0
	for _, s := range []string{d.http, d.pgUser, d.domain} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("describe one request: -http 'GET /path', -pg-user USER or -envoy-domain D -descriptor k=v")
	}
	switch {
	case d.http != "":
		method, target := http.MethodGet, d.http
		if m, t, ok := strings.Cut(d.http, " "); ok {
			method, target = strings.ToUpper(m), strings.TrimSpace(t)
		}
		h := &admin.HTTPRequest{Method: method, URL: target, Host: d.host, Peer: d.peer, Headers: map[string][]string{}}
		for _, line := range d.headers {
			name, value, ok := strings.Cut(line, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return nil, fmt.Errorf("-H %q: give \"Name: value\"", line)
			}
			name = strings.TrimSpace(name)
			h.Headers[name] = append(h.Headers[name], strings.TrimSpace(value))
		}
		return &admin.ExplainRequest{HTTP: h}, nil
	case d.pgUser != "":
		return &admin.ExplainRequest{Postgres: &admin.PostgresClient{User: d.pgUser, Peer: d.peer}}, nil
	}
	if len(d.descriptors) == 0 {
		return nil, errors.New("-envoy-domain needs at least one -descriptor k=v,k2=v2")
	}
	e := &admin.EnvoyDescriptor{Domain: d.domain, HitsAddend: d.hits}
	for _, desc := range d.descriptors {
		var entries []admin.EnvoyEntry
		for _, kv := range strings.Split(desc, ",") {
			k, v, _ := strings.Cut(kv, "=")
			entries = append(entries, admin.EnvoyEntry{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)})
		}
		e.Descriptors = append(e.Descriptors, entries)
	}
	return &admin.ExplainRequest{Envoy: e}, nil
}

// askExplain sends req to the daemon's /v1/explain.
func askExplain(addr, token string, req *admin.ExplainRequest) (*admin.Explanation, error) {
	body, _ := json.Marshal(req)
	resp, b, err := callDaemon(http.MethodPost, strings.TrimSuffix(addr, "/")+"/v1/explain", body, token)
	if err != nil {
		if errors.Is(err, errUsage) {
			return nil, err
		}
		return nil, fmt.Errorf("%v (is the daemon's admin listener on %s?)", err, addr)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, answerError(b))
	}
	var ex admin.Explanation
	if err := json.Unmarshal(b, &ex); err != nil {
		return nil, fmt.Errorf("the daemon answered something else than an explanation: %v", err)
	}
	return &ex, nil
}

// explain is `floodgate explain`.
func explain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("explain", stderr)
	var d description
	d.flags(fs)
	addr, token := adminFlags(fs)
	asJSON := fs.Bool("json", false, "print the daemon's answer as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate explain: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	req, err := d.request()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate explain: %v\n", err)
		fs.Usage()
		return 2
	}
	ex, err := askExplain(*addr, *token, req)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate explain: %v\n", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	if *asJSON {
		b, _ := json.MarshalIndent(ex, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	printExplanation(stdout, ex)
	return 0
}

// printExplanation writes ex for a person.
func printExplanation(w io.Writer, ex *admin.Explanation) {
	fmt.Fprintf(w, "front end:  %s\n", ex.Front)
	if ex.Redirect != "" {
		fmt.Fprintf(w, "redirect:   308 to %s first; the routes see that path\n", ex.Redirect)
	}
	for _, r := range ex.Routes {
		verdict := "no match"
		if r.Matched {
			verdict = "MATCH   "
		}
		line := fmt.Sprintf("%s  %s", verdict, r.Name)
		if r.Match != "" {
			line += " [" + r.Match + "]"
		}
		if r.Shadow {
			line += " (shadow)"
		}
		if r.Why != "" {
			line += ": " + r.Why
		}
		fmt.Fprintln(w, line)
	}
	for _, c := range ex.Checks {
		fmt.Fprintf(w, "\ncheck:      %s\n", c.Where)
		if c.Policy != "" {
			fmt.Fprintf(w, "policy:     %s\n", c.Policy)
		}
		if c.Skip != "" {
			fmt.Fprintf(w, "skipped:    %s\n", c.Skip)
			continue
		}
		fmt.Fprintf(w, "key:        %q\ncost:       %d\n", c.Key, c.Cost)
		if c.Shadow {
			fmt.Fprintln(w, "shadow:     yes: decided and counted, never refused")
		}
		if c.Error != "" {
			fmt.Fprintf(w, "state:      unknown: the engine did not answer: %s\n", c.Error)
		}
		if c.State != nil {
			printState(w, c.State)
		}
	}
	for _, n := range ex.Notes {
		fmt.Fprintf(w, "\nnote:       %s\n", n)
	}
}

// printState writes a key's state: the lines of floodgate key show.
func printState(w io.Writer, st *admin.KeyState) {
	state := "not limited"
	switch {
	case st.Source == string(floodgate.SourcePenalty):
		state = fmt.Sprintf("PENALISED: every request is denied for %s more, until the policy's penalty ends (floodgate key reset lifts it)",
			time.Duration(st.RetryAfterSeconds*float64(time.Second)).Round(time.Second))
	case st.Limited:
		state = "LIMITED: the next request is denied"
	}
	set := "the policy's defaults"
	if st.LimitSet != "" {
		set = st.LimitSet
	}
	if o := st.RuntimeOverride; o != nil {
		what := strings.Join(o.Limits, ", ")
		if o.Multiplier != 0 {
			what = fmt.Sprintf("×%g", o.Multiplier)
		}
		set = fmt.Sprintf("runtime override %s until %s, by %s", what, o.Expires.Local().Format(time.RFC3339), o.By)
		if o.Reason != "" {
			set += ": " + o.Reason
		}
	}
	fmt.Fprintf(w, "state:      %s\nremaining:  %d under %s\nfull in:    %s\nlimits:     %s (%s)\nsource:     %s\n",
		state, st.Remaining, st.Limit,
		time.Duration(st.ResetAfterSeconds*float64(time.Second)).Round(time.Millisecond),
		strings.Join(st.Limits, ", "), set, st.Source)
	if len(st.Recent) > 0 {
		fmt.Fprintln(w, "last decisions, newest first:")
		for i := len(st.Recent) - 1; i >= 0; i-- {
			d := st.Recent[i]
			verdict := "allowed"
			if !d.Allowed {
				verdict = "DENIED "
			}
			route := ""
			if d.Route != "" {
				route = " route " + d.Route
			}
			fmt.Fprintf(w, "  %s %s%s cost %d, %d left under %s, by %s\n", d.At.Format(time.RFC3339Nano), verdict, route, d.Cost, d.Remaining, d.Limit, d.Source)
		}
	}
}
