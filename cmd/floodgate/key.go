package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/config"
)

// key is `floodgate key show|reset`: a key's state under a policy, read
// without charging it, or reset, through the admin listener's /v1/keys.
func key(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "show" && args[0] != "reset") {
		fmt.Fprint(stderr, "usage: floodgate key show|reset -policy P -key K [-addr URL] [-token T]\n")
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("key "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "", "policy `name`")
	k := fs.String("key", "", "the `key`, e.g. user:42")
	addr := fs.String("addr", "http://"+config.DefaultAdminListen, "the daemon's admin listener `URL`")
	token := fs.String("token", os.Getenv("FLOODGATE_ADMIN_TOKEN"), "the admin `token` (default $FLOODGATE_ADMIN_TOKEN)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *policy == "" || *k == "" {
		fmt.Fprintf(stderr, "floodgate key %s: -policy and -key are required\n", verb)
		return 2
	}
	method := http.MethodGet
	if verb == "reset" {
		method = http.MethodDelete
	}
	u := strings.TrimSuffix(*addr, "/") + "/v1/keys?" + url.Values{"policy": {*policy}, "key": {*k}}.Encode()
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
		msg := string(bytes.TrimSpace(b))
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		fmt.Fprintf(stderr, "floodgate key %s: %s: %s\n", verb, resp.Status, msg)
		return 1
	}
	var st struct {
		Policy            string   `json:"policy"`
		Key               string   `json:"key"`
		Redacted          string   `json:"redacted"`
		Limited           bool     `json:"limited"`
		Remaining         int64    `json:"remaining"`
		Limit             string   `json:"limit"`
		Limits            []string `json:"limits"`
		LimitSet          string   `json:"limit_set"`
		ResetAfterSeconds float64  `json:"reset_after_seconds"`
		Source            string   `json:"source"`
		Reset             bool     `json:"reset"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		fmt.Fprintf(stderr, "floodgate key: the daemon answered something else than a key's state: %v\n", err)
		return 1
	}
	if st.Reset {
		fmt.Fprintln(stdout, "reset:      yes, the key meets full capacity again")
	}
	state := "not limited"
	if st.Limited {
		state = "LIMITED: the next request is denied"
	}
	set := "the policy's defaults"
	if st.LimitSet != "" {
		set = st.LimitSet
	}
	fmt.Fprintf(stdout, "policy:     %s\nkey:        %s (logged as %s)\nstate:      %s\nremaining:  %d under %s\nfull in:    %s\nlimits:     %s (%s)\nsource:     %s\n",
		st.Policy, st.Key, st.Redacted, state, st.Remaining, st.Limit,
		time.Duration(st.ResetAfterSeconds*float64(time.Second)).Round(time.Millisecond),
		strings.Join(st.Limits, ", "), set, st.Source)
	return 0
}
