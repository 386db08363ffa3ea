package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/proxy"
	"github.com/floodgate-go/floodgate/status"
	"github.com/floodgate-go/floodgate/tokencost"
)

// proxyRoutes turns the proxy's routes into proxy routes whose rules use
// limiters and whose concurrency sections hold slots in conc.
func proxyRoutes(p *config.Proxy, limiters map[string]floodgate.Limiter, conc *concLimits) ([]proxy.Route, error) {
	res, err := clientip.New(p.ClientIP.Config())
	if err != nil {
		return nil, fmt.Errorf("proxy.client_ip: %w", err)
	}
	trusted, err := clientip.ParsePrefixes(p.UserTrustedFrom)
	if err != nil {
		return nil, fmt.Errorf("proxy.user_trusted_from: %w", err)
	}
	routes := make([]proxy.Route, 0, len(p.Routes))
	for i := range p.Routes {
		r := &p.Routes[i]
		tokens, err := routeTokens(r)
		if err != nil {
			return nil, fmt.Errorf("proxy.routes[%d].tokens: %w", i, err)
		}
		var rules []httplimit.Rule
		for j := range r.Limits {
			rl := &r.Limits[j]
			lim := limiters[rl.Policy]
			if lim == nil {
				return nil, fmt.Errorf("proxy.routes[%d].limits[%d]: no policy %q", i, j, rl.Policy)
			}
			// The status page's recent decisions name the route.
			lim = status.WithRoute(lim, r.Name)
			rule := routeRule(rl, lim, r.Name, res, trusted)
			if rl.Cost.Tokens != "" {
				rule.Tokens = tokens
				rule.TokenCount, _ = tokencost.ParseCount(rl.Cost.Tokens) // parsed with the file
			}
			rules = append(rules, rule)
		}
		pr := proxy.Route{Name: r.Name, Match: r.Match, Shadow: r.Shadow, Limits: rules}
		if c := r.Concurrency; c != nil {
			var key httplimit.KeyFunc
			if len(c.Key) > 0 {
				key = keyFunc(c.Key, httplimit.KeyByIP(res), func(r *http.Request) bool { return trusted.ContainsPeer(r.RemoteAddr) }, r.Name)
			}
			if pr.Concurrency, err = conc.throttler(r.Name, c, key, p.Body); err != nil {
				return nil, fmt.Errorf("proxy.routes[%d].concurrency: %w", i, err)
			}
		}
		routes = append(routes, pr)
	}
	return routes, nil
}

// routeTokens is the token source of a route's tokens:COUNT costs, nil
// when it has none.
func routeTokens(r *config.Route) (*tokencost.Source, error) {
	for _, l := range r.Limits {
		if l.Cost.Tokens != "" {
			var cfg tokencost.Settings
			if r.Tokens != nil {
				cfg = *r.Tokens
			}
			return tokencost.New(cfg)
		}
	}
	return nil, nil
}

// routeRule is the httplimit rule of one route limit: the key built from
// the library's key functions (so a Go service and the daemon key one
// client alike), user and tier headers believed only from
// user_trusted_from, the cost and which responses count.
func routeRule(rl *config.RouteLimit, lim floodgate.Limiter, route string, res *clientip.Resolver, trusted clientip.Prefixes) httplimit.Rule {
	fromTrusted := func(r *http.Request) bool { return trusted.ContainsPeer(r.RemoteAddr) }
	key := keyFunc(rl.Key, httplimit.KeyByIP(res), fromTrusted, route)
	if h := rl.TierHeader; h != "" {
		inner := key
		key = func(r *http.Request) string {
			if fromTrusted(r) {
				if tier := r.Header.Get(h); tier != "" {
					return "tier:" + tier + "|" + inner(r)
				}
			}
			return inner(r)
		}
	}
	rule := httplimit.Rule{Limiter: lim, Key: key, Count: rl.Count}
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
				// Unknown: the up-front unit stands. An upstream that
				// stops reporting its costs still pays for its requests.
				return -1
			}
			return n
		}
	}
	return rule
}

// keyFunc is the key function of a route limit's key, made of httplimit's
// key functions: ip is KeyByIP (the address alone), header:NAME is
// KeyByHeader ("x-api-key:VALUE", or "ip:ADDRESS" without the header),
// user:NAME is KeyByUser over the header from a trusted peer ("user:ID",
// else "ip:ADDRESS"), route is "route:NAME", global is "global", and a
// list joins its parts with JoinKeys. Policy overrides are keyed by these
// strings.
func keyFunc(k config.Key, ip httplimit.KeyFunc, trusted func(*http.Request) bool, route string) httplimit.KeyFunc {
	parts := make([]httplimit.KeyFunc, len(k))
	for i, p := range k {
		switch p.Source {
		case config.KeyHeader:
			parts[i] = httplimit.KeyByHeader(p.Header, ip)
		case config.KeyUser:
			h := p.Header
			parts[i] = httplimit.KeyByUser(func(r *http.Request) string {
				if !trusted(r) {
					return ""
				}
				return strings.TrimSpace(r.Header.Get(h))
			}, ip)
		case config.KeyRoute:
			parts[i] = httplimit.KeyConst("route:" + route)
		case config.KeyGlobal:
			parts[i] = httplimit.KeyConst("global")
		default:
			parts[i] = ip
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return httplimit.JoinKeys(parts...)
}

// keyShapes are the shapes (admin.ShapeMatches) of the keys keyFunc makes
// for k, with tierHeader the tier prefix a trusted peer may add: the
// same cases as keyFunc, so /v1/keys can tell a key no route makes.
func keyShapes(k config.Key, tierHeader, route string) []string {
	shapes := []string{""}
	for i, p := range k {
		var alts []string
		switch p.Source {
		case config.KeyHeader:
			alts = []string{strings.ToLower(http.CanonicalHeaderKey(p.Header)) + ":" + admin.ShapeValue, "ip:" + admin.ShapeAddress}
		case config.KeyUser:
			alts = []string{"user:" + admin.ShapeValue, "ip:" + admin.ShapeAddress}
		case config.KeyRoute:
			name := "route:" + route
			if len(k) > 1 {
				// JoinKeys escapes | and \ in its parts; the route's name is
				// the one part whose literal text may hold them.
				name = strings.NewReplacer(`\`, `\\`, "|", `\|`).Replace(name)
			}
			alts = []string{name}
		case config.KeyGlobal:
			alts = []string{"global"}
		default:
			alts = []string{admin.ShapeAddress}
		}
		var next []string
		for _, s := range shapes {
			for _, a := range alts {
				if i > 0 {
					a = "|" + a
				}
				next = append(next, s+a)
			}
		}
		shapes = next
	}
	if tierHeader != "" {
		for _, s := range shapes {
			shapes = append(shapes, "tier:"+admin.ShapeValue+"|"+s)
		}
	}
	return shapes
}

// NewLogger returns a logger as the log section says: text or JSON on w, at
// its level.
func NewLogger(w io.Writer, l config.Log) *slog.Logger {
	level := new(slog.LevelVar)
	level.Set(logLevel(l))
	return newLogger(w, l.Format, level)
}

func newLogger(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(format, "json") {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// logLevel is the log section's level; the configuration's checks keep it
// to the levels slog knows.
func logLevel(l config.Log) slog.Level {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return slog.LevelInfo
	}
	return level
}
