package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/admin"
)

// override is `floodgate override set|delete|list`: limits changed at
// runtime, through the admin listener's /v1/overrides.
func override(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "set" && args[0] != "delete" && args[0] != "list") {
		lookup("override").writeSynopsis(stderr, "usage: ")
		return 2
	}
	verb := args[0]
	fs := newFlagSet("override "+verb, stderr)
	policy := fs.String("policy", "", "policy `name`")
	addr, token := adminFlags(fs)
	var key, tier, rate, algorithm, ttl, by, reason string
	var burst int64
	var multiplier float64
	var anyShape bool
	if verb != "list" {
		fs.StringVar(&key, "key", "", "the `key` it applies to, e.g. user:42")
		fs.StringVar(&tier, "tier", "", "the `tier` it applies to (every key of it), instead of -key")
	}
	if verb == "set" {
		fs.StringVar(&rate, "rate", "", "the `limit`, e.g. 500/s (or give -multiplier)")
		fs.Int64Var(&burst, "burst", 0, "the most `units` at once under -rate (default the rate)")
		fs.StringVar(&algorithm, "algorithm", "", "the `algorithm` of -rate (default the policy's)")
		fs.Float64Var(&multiplier, "multiplier", 0, "multiply the limits the key would get otherwise by `M` (2 doubles, 0.1 cuts to a tenth)")
		fs.StringVar(&ttl, "ttl", "", "how `long` it lasts, e.g. 2h (required, at most 90 days)")
		fs.StringVar(&by, "by", os.Getenv("USER"), "`who` sets it, for the audit trail (default $USER)")
		fs.StringVar(&reason, "reason", "", "`why`, for the audit trail")
		fs.BoolVar(&anyShape, "any-shape", false, "set it even if no front end makes keys of the key's shape (a key a check API caller sends)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "floodgate override %s: %s\n", verb, msg)
		return 2
	}
	if fs.NArg() > 0 {
		return usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	q := url.Values{}
	if *policy != "" {
		q.Set("policy", *policy)
	}
	method, body := http.MethodGet, []byte(nil)
	if verb != "list" {
		if *policy == "" || (key == "") == (tier == "") {
			return usage("give -policy and one of -key and -tier")
		}
		if key != "" {
			q.Set("key", key)
		} else {
			q.Set("tier", tier)
		}
		method = http.MethodDelete
	}
	if verb == "set" {
		method = http.MethodPut
		if anyShape {
			q.Set("any_shape", "1")
		}
		// The admin API checks the rest, with the configuration's words.
		req := map[string]any{}
		for name, v := range map[string]string{"rate": rate, "algorithm": algorithm, "ttl": ttl, "by": by, "reason": reason} {
			if v != "" {
				req[name] = v
			}
		}
		if burst != 0 {
			req["burst"] = burst
		}
		if multiplier != 0 {
			req["multiplier"] = multiplier
		}
		body, _ = json.Marshal(req)
	}
	resp, b, err := callDaemon(method, strings.TrimSuffix(*addr, "/")+"/v1/overrides?"+q.Encode(), body, *token)
	if errors.Is(err, errUsage) {
		return usage(err.Error())
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate override: %v (is the daemon's admin listener on %s?)\n", err, *addr)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "floodgate override %s: %s: %s\n", verb, resp.Status, answerError(b))
		return 1
	}
	switch verb {
	case "delete":
		fmt.Fprintf(stdout, "deleted: %s %s\n", *policy, target(key, tier))
	case "set":
		var v admin.OverrideView
		if err := json.Unmarshal(b, &v); err != nil {
			fmt.Fprintf(stderr, "floodgate override: the daemon answered something else than an override: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "set: %s\n", describeOverride(v))
	case "list":
		var list struct{ Overrides []admin.OverrideView }
		if err := json.Unmarshal(b, &list); err != nil {
			fmt.Fprintf(stderr, "floodgate override: the daemon answered something else than a list of overrides: %v\n", err)
			return 1
		}
		if len(list.Overrides) == 0 {
			fmt.Fprintln(stdout, "no runtime overrides in force")
		}
		for _, v := range list.Overrides {
			fmt.Fprintln(stdout, describeOverride(v))
		}
	}
	return 0
}

func target(key, tier string) string {
	if tier != "" {
		return "tier " + tier
	}
	return "key " + key
}

// describeOverride writes one override on a line: policy, target, what,
// until when, by whom and why.
func describeOverride(v admin.OverrideView) string {
	what := strings.Join(v.Limits, ", ")
	if v.Multiplier != 0 {
		what = fmt.Sprintf("×%g", v.Multiplier)
	}
	s := fmt.Sprintf("%s %s: %s until %s (%s left)", v.Policy, target(v.Key, v.Tier), what,
		v.Expires.Local().Format(time.RFC3339), time.Until(v.Expires).Round(time.Second))
	if v.By != "" {
		s += ", by " + v.By
	}
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	return s
}
