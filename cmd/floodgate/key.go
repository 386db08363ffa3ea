package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/floodgate-go/floodgate/admin"
)

// key is `floodgate key show|reset`: a key's state under a policy, read
// without charging it, or reset, through the admin listener's /v1/keys.
func key(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "show" && args[0] != "reset") {
		lookup("key").writeSynopsis(stderr, "usage: ")
		return 2
	}
	verb := args[0]
	fs := newFlagSet("key "+verb, stderr)
	policy := fs.String("policy", "", "policy `name`")
	k := fs.String("key", "", "the `key`, e.g. user:42")
	addr, token := adminFlags(fs)
	anyShape := fs.Bool("any-shape", false, "look the key up even if no front end makes keys of its shape (a key a check API caller sent)")
	var desc description
	if verb == "show" {
		desc.flags(fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if desc.given() {
		// The keys of a described request, as floodgate explain finds them.
		if *policy != "" || *k != "" {
			fmt.Fprint(stderr, "floodgate key show: give -policy and -key, or a request to find the keys of, not both\n")
			return 2
		}
		req, err := desc.request()
		if err != nil {
			fmt.Fprintf(stderr, "floodgate key show: %v\n", err)
			return 2
		}
		ex, err := askExplain(*addr, *token, req)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate key show: %v\n", err)
			return 1
		}
		n := 0
		for _, c := range ex.Checks {
			if c.State == nil {
				continue
			}
			if n > 0 {
				fmt.Fprintln(stdout)
			}
			n++
			fmt.Fprintf(stdout, "policy:     %s\nkey:        %s (logged as %s)\nchecked by: %s\n", c.Policy, c.Key, c.State.Redacted, c.Where)
			printState(stdout, c.State)
		}
		if n == 0 {
			fmt.Fprintln(stdout, "no key: the request is checked against no limit (floodgate explain tells why)")
		}
		return 0
	}
	if *policy == "" || *k == "" {
		fmt.Fprintf(stderr, "floodgate key %s: -policy and -key are required (or, for show, a request: -http, -pg-user or -envoy-domain)\n", verb)
		return 2
	}
	method := http.MethodGet
	if verb == "reset" {
		method = http.MethodDelete
	}
	q := url.Values{"policy": {*policy}, "key": {*k}}
	if *anyShape {
		q.Set("any_shape", "1")
	}
	u := strings.TrimSuffix(*addr, "/") + "/v1/keys?" + q.Encode()
	resp, b, err := callDaemon(method, u, nil, *token)
	if errors.Is(err, errUsage) {
		fmt.Fprintf(stderr, "floodgate key: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate key: %v (is the daemon's admin listener on %s?)\n", err, *addr)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "floodgate key %s: %s: %s\n", verb, resp.Status, answerError(b))
		return 1
	}
	var st admin.KeyState
	if err := json.Unmarshal(b, &st); err != nil {
		fmt.Fprintf(stderr, "floodgate key: the daemon answered something else than a key's state: %v\n", err)
		return 1
	}
	if st.Reset {
		fmt.Fprintln(stdout, "reset:      yes, the key meets full capacity again")
	}
	fmt.Fprintf(stdout, "policy:     %s\nkey:        %s (logged as %s)\n", st.Policy, st.Key, st.Redacted)
	printState(stdout, &st)
	return 0
}
