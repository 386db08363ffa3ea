package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/proxy"
)

// proxyRoutes turns the proxy's routes into server routes whose rules use
// limiters. A route matching several path prefixes becomes one server route
// per prefix, with the same rules.
func proxyRoutes(p *config.Proxy, limiters map[string]floodgate.Limiter) ([]proxy.Route, error) {
	res, err := clientip.New(p.ClientIP.Config())
	if err != nil {
		return nil, fmt.Errorf("proxy.client_ip: %w", err)
	}
	trusted, err := prefixes(p.UserTrustedFrom)
	if err != nil {
		return nil, fmt.Errorf("proxy.user_trusted_from: %w", err)
	}
	var routes []proxy.Route
	for i := range p.Routes {
		r := &p.Routes[i]
		name := r.Name
		if name == "" {
			name = "route " + strconv.Itoa(i+1)
		}
		var rules []httplimit.Rule
		for j := range r.Limits {
			rl := &r.Limits[j]
			lim := limiters[rl.Policy]
			if lim == nil {
				return nil, fmt.Errorf("proxy.routes[%d].limits[%d]: no policy %q", i, j, rl.Policy)
			}
			rules = append(rules, routeRule(rl, lim, name, res, trusted))
		}
		m := r.Match
		base := proxy.Route{Name: name, Shadow: r.Shadow, Limits: rules,
			Match: proxy.Match{Host: m.Host, Path: m.Path, Methods: m.Methods}}
		if len(m.PathPrefix) == 0 {
			routes = append(routes, base)
			continue
		}
		for _, pf := range m.PathPrefix {
			sr := base
			sr.Match.PathPrefix = pf
			routes = append(routes, sr)
		}
	}
	return routes, nil
}

// routeRule is the httplimit rule of one route limit: the key built as the
// configuration defines it (config.Key.Build, with user headers believed
// only from user_trusted_from), the cost, which responses count, and the
// tier from a trusted header.
func routeRule(rl *config.RouteLimit, lim floodgate.Limiter, route string, res *clientip.Resolver, trusted []netip.Prefix) httplimit.Rule {
	isTrusted := func(r *http.Request) bool {
		if len(trusted) == 0 {
			return false
		}
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return false
		}
		a := ap.Addr().Unmap()
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	key := rl.Key
	rule := httplimit.Rule{
		Limiter: lim,
		Key: func(r *http.Request) string {
			t := isTrusted(r)
			k := key.Build(config.KeyInput{IP: res.Key(r), Header: r.Header.Get, Trusted: t, Route: route})
			if rl.TierHeader != "" {
				if tier := rl.Tier(r.Header.Get, t); tier != "" {
					return "tier:" + tier + "|" + k
				}
			}
			return k
		},
	}
	switch rl.Count {
	case config.CountFailed:
		rule.Count = httplimit.CountFailed
	case config.CountSuccessful:
		rule.Count = httplimit.CountSuccessful
	}
	c := rl.Cost
	if c.Header != "" {
		units := max(c.Units, 1)
		rule.Cost = func(r *http.Request) int64 {
			if n, err := strconv.ParseInt(strings.TrimSpace(r.Header.Get(c.Header)), 10, 64); err == nil && n >= 0 {
				return n
			}
			return units
		}
	} else if c.Units != 1 && c.Units > 0 {
		units := c.Units
		rule.Cost = func(*http.Request) int64 { return units }
	}
	if c.ResponseHeader != "" {
		rule.ResponseCost = func(_ int, h http.Header) int64 {
			n, err := strconv.ParseInt(strings.TrimSpace(h.Get(c.ResponseHeader)), 10, 64)
			if err != nil || n < 0 {
				return 0
			}
			return n
		}
	}
	return rule
}

func headers(h config.Headers) httplimit.Headers {
	return httplimit.Headers{
		DisableXRateLimit: !h.XRateLimit,
		DisableRateLimit:  !h.RateLimit,
		DisableRetryAfter: !h.RetryAfter,
		Source:            h.Source,
		UnixReset:         h.UnixReset,
	}
}

func body(b config.Body) httplimit.Body {
	switch b {
	case config.BodyJSON:
		return httplimit.BodyJSON
	case config.BodyNone:
		return httplimit.BodyNone
	}
	return httplimit.BodyProblem
}

// NewLogger returns the daemon's logger as the log section says: text or
// JSON on w, at its level.
func NewLogger(w io.Writer, l config.Log) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		level = slog.LevelInfo
	}
	o := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(string(l.Format), "json") {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
