package fiberlimit

import (
	"strconv"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/valyala/fasthttp"
)

// mergeHeaders sets the rate-limit fields of v on h, merged with those a
// nested fiberlimit middleware set before (the inner one returns first):
// one set of fields for the response, as one middleware with both limits
// would send. X-RateLimit-Limit, -Remaining and -Reset describe the most
// restrictive decision, the one with fewer units left (on a tie, the one
// already there: an inner denial); RateLimit-Policy lists the limits of
// both, and RateLimit has an item per decided limit, the outer
// middleware's first, as httplimit orders its rules from the widest.
func mergeHeaders(h *fasthttp.ResponseHeader, v *httplimit.Answer) {
	var names, vals [16]string
	n := 0
	v.Headers(func(name, value string) {
		if n < len(names) {
			names[n], vals[n] = name, value
			n++
		}
	})
	if n == 0 {
		return
	}
	mine := ""
	for i := range n {
		if names[i] == "X-Ratelimit-Remaining" {
			mine = vals[i]
		}
	}
	prev := h.Peek("X-Ratelimit-Remaining")
	keepPrev := false
	if len(prev) > 0 && mine != "" {
		p, err1 := strconv.ParseInt(string(prev), 10, 64)
		m, err2 := strconv.ParseInt(mine, 10, 64)
		keepPrev = err1 == nil && err2 == nil && p <= m
	}
	var policies []string
	for i := range n {
		name, val := names[i], vals[i]
		switch name {
		case "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset":
			if !keepPrev {
				h.Set(name, val)
			}
		case "Ratelimit":
			if old := h.Peek(name); len(old) > 0 {
				val = val + ", " + string(old)
			}
			h.Set(name, val)
		case "Ratelimit-Policy":
			policies = append(policies, val)
		default: // Retry-After (a denial's, which ends the chain), X-RateLimit-Source
			if len(h.Peek(name)) == 0 {
				h.Set(name, val)
			}
		}
	}
	if len(policies) > 0 {
		for _, old := range h.PeekAll("Ratelimit-Policy") {
			if s := string(old); !contains(policies, s) {
				policies = append(policies, s)
			}
		}
		h.Del("Ratelimit-Policy")
		for _, p := range policies {
			h.Add("Ratelimit-Policy", p)
		}
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
