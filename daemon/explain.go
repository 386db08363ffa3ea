package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/httplimit"
)

// Explain answers what the front end a request describes would do with it:
// the proxy's routes and their limits (proxy.Explain), the Envoy rules'
// match (envoyrules.Rules.Explain) or the PostgreSQL proxy's scopes
// (pgproxy.Proxy.Explain), each key's limits and state read with a peek.
// It charges nothing. An error wrapping admin.ErrExplain is the request's
// fault.
func (d *Daemon) Explain(ctx context.Context, req *admin.ExplainRequest) (*admin.Explanation, error) {
	g := d.cur.Load()
	var ex *admin.Explanation
	var err error
	switch {
	case req.HTTP != nil:
		ex, err = d.explainHTTP(ctx, g, req.HTTP)
	case req.Envoy != nil:
		ex, err = d.explainEnvoy(g, req.Envoy)
	case req.Postgres != nil:
		ex, err = d.explainPostgres(req.Postgres)
	default:
		err = fmt.Errorf("%w: describe an http, envoy or postgres request", admin.ErrExplain)
	}
	if err != nil {
		return nil, err
	}
	for i := range ex.Checks {
		c := &ex.Checks[i]
		lim := g.limiters[c.Policy]
		if c.Skip != "" || lim == nil {
			continue
		}
		st, err := admin.Inspect(ctx, lim, c.Key, c.Cost)
		if err != nil {
			c.Error = err.Error()
			continue
		}
		if !d.noStatus {
			st.Recent = d.status.st.Recent(c.Policy, c.Key)
		}
		admin.AnnotateOverride(d.overrides.table, &st)
		c.State = &st
	}
	return ex, nil
}

func (d *Daemon) explainHTTP(ctx context.Context, g *generation, h *admin.HTTPRequest) (*admin.Explanation, error) {
	if g.proxy == nil {
		return nil, fmt.Errorf("%w: no proxy section: no front end takes HTTP requests to explain", admin.ErrExplain)
	}
	method := h.Method
	if method == "" {
		method = http.MethodGet
	}
	u, host := h.URL, h.Host
	if abs, err := url.Parse(u); err == nil && abs.IsAbs() && abs.Host != "" {
		// A whole URL: its host is the request's Host unless one is given.
		u = abs.RequestURI()
		if host == "" {
			host = abs.Host
		}
	}
	if !strings.HasPrefix(u, "/") {
		return nil, fmt.Errorf("%w: http.url %q: give the path and query, e.g. /api/items?id=1, or a whole URL", admin.ErrExplain, h.URL)
	}
	if host == "" {
		host = "localhost"
	}
	r, err := http.NewRequestWithContext(ctx, method, "http://"+host+u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", admin.ErrExplain, err)
	}
	for name, vs := range h.Headers {
		for _, v := range vs {
			r.Header.Add(name, v)
		}
	}
	r.Host = host
	if r.RemoteAddr, err = peerAddr(h.Peer); err != nil {
		return nil, err
	}
	px := g.proxy.Explain(r)
	ex := &admin.Explanation{Front: "proxy", Redirect: px.Redirect, Checks: []admin.Step{}}
	if px.BadPath != nil {
		ex.Notes = append(ex.Notes, "the proxy answers 400 and no route sees the request: "+px.BadPath.Error())
		return ex, nil
	}
	if px.Redirect != "" {
		ex.Notes = append(ex.Notes, "the path is not clean: the proxy answers 308 to "+px.Redirect+", and the routes see that path")
	}
	for _, rt := range px.Routes {
		ex.Routes = append(ex.Routes, admin.Route{Name: rt.Name, Match: rt.Match, Matched: rt.Matched, Why: rt.Why, Shadow: rt.Shadow})
	}
	if px.Route < 0 {
		ex.Notes = append(ex.Notes, "no route matches: the request is forwarded unlimited")
		return ex, nil
	}
	rt := px.Routes[px.Route]
	if !rt.Limited {
		ex.Notes = append(ex.Notes, fmt.Sprintf("route %q has no limits: the request is forwarded unlimited", rt.Name))
	}
	if rt.Shadow {
		ex.Notes = append(ex.Notes, fmt.Sprintf("route %q is a shadow route: its limits decide and count, but never refuse", rt.Name))
	}
	for i, p := range px.Checks {
		c := admin.Step{Where: fmt.Sprintf("route %q limit %d", rt.Name, i+1), Key: p.Key, Cost: p.Cost, Shadow: rt.Shadow}
		if p.Limiter != nil {
			c.Policy = p.Limiter.Name()
		}
		if p.Skip != httplimit.SkipNone {
			c.Skip = p.Skip.String()
		}
		ex.Checks = append(ex.Checks, c)
	}
	return ex, nil
}

// peerAddr is an explain request's peer as a RemoteAddr: ADDRESS:PORT,
// a port added to a bare address.
func peerAddr(peer string) (string, error) {
	if peer == "" {
		return "127.0.0.1:1", nil
	}
	if _, err := netip.ParseAddrPort(peer); err == nil {
		return peer, nil
	}
	a, err := netip.ParseAddr(strings.Trim(peer, "[]"))
	if err != nil {
		return "", fmt.Errorf("%w: peer %q: give an address, e.g. 203.0.113.7 or [2001:db8::1]:443", admin.ErrExplain, peer)
	}
	return netip.AddrPortFrom(a, 1).String(), nil
}

func (d *Daemon) explainEnvoy(g *generation, e *admin.EnvoyDescriptor) (*admin.Explanation, error) {
	c := g.cfg.Envoy
	if c == nil || c.Rules == nil {
		return nil, fmt.Errorf("%w: no envoy section: no front end takes descriptors to explain", admin.ErrExplain)
	}
	if e.Domain == "" || len(e.Descriptors) == 0 {
		return nil, fmt.Errorf("%w: give the domain and at least one descriptor, as Envoy must", admin.ErrExplain)
	}
	descs := make([][]envoyrules.Entry, len(e.Descriptors))
	for i, d := range e.Descriptors {
		for _, en := range d {
			descs[i] = append(descs[i], envoyrules.Entry{Key: en.Key, Value: en.Value})
		}
	}
	cost := max(e.HitsAddend, 1)
	ex := &admin.Explanation{Front: "envoy", Checks: []admin.Step{}}
	for i, m := range c.Rules.Explain(e.Domain, descs, nil) {
		name := fmt.Sprintf("descriptor %d (%s)", i+1, envoyrules.Key(descs[i]))
		rt := admin.Route{Name: name, Matched: m.Rule != nil, Why: m.Why}
		if m.Rule != nil {
			rt.Match, rt.Shadow = m.Rule.Policy, m.Rule.Shadow
		}
		ex.Routes = append(ex.Routes, rt)
		r := m.Rule
		if r == nil {
			continue
		}
		ck := admin.Step{Where: name, Policy: r.Policy, Key: r.Key, Cost: cost, Shadow: r.Shadow || c.ShadowMode}
		switch {
		case r.Unlimited:
			ck.Skip = "the rule is unlimited: the descriptor is never limited"
		case r.Blocked:
			ck.Skip = "the rule has requests_per_unit 0: every request is denied"
		}
		ex.Checks = append(ex.Checks, ck)
	}
	if c.ShadowMode {
		ex.Notes = append(ex.Notes, "envoy.shadow_mode is on: every descriptor decides and counts, but the answer is OK")
	}
	ex.Notes = append(ex.Notes, "descriptors that carry their own limit, hits_addend per descriptor and negative hits are not described here")
	return ex, nil
}

func (d *Daemon) explainPostgres(p *admin.PostgresClient) (*admin.Explanation, error) {
	if d.pg == nil {
		return nil, fmt.Errorf("%w: no postgres section: no front end takes PostgreSQL clients to explain", admin.ErrExplain)
	}
	peer := p.Peer
	if peer == "" {
		peer = "127.0.0.1"
	}
	addr, err := netip.ParseAddr(strings.Trim(peer, "[]"))
	if err != nil {
		host, _, serr := net.SplitHostPort(peer)
		if addr, err = netip.ParseAddr(host); serr != nil || err != nil {
			return nil, fmt.Errorf("%w: peer %q: give the client's address, e.g. 203.0.113.7", admin.ErrExplain, peer)
		}
	}
	ex := &admin.Explanation{Front: "postgres", Checks: []admin.Step{}}
	for _, pl := range d.pg.Explain(p.User, addr) {
		where := "each query, scope " + pl.Scope
		if pl.Connection {
			where = "each new connection, scope " + pl.Scope
		}
		if pl.MaxWait {
			where += " (a denied query waits up to max_wait)"
		}
		ex.Checks = append(ex.Checks, admin.Step{Where: where, Policy: pl.Limiter.Name(), Key: pl.Key, Cost: 1})
	}
	if len(ex.Checks) == 0 {
		ex.Notes = append(ex.Notes, "the PostgreSQL proxy has no limits: its queries and connections pass unlimited")
	}
	return ex, nil
}

// configKeyShapes returns, by policy, the shapes of the keys cfg's front ends
// make: the proxy routes' key functions, the Envoy rules' descriptors and
// the PostgreSQL proxy's scopes. Policies only the check API uses take any
// key and have none.
func configKeyShapes(cfg *config.Config) map[string][]string {
	out := map[string][]string{}
	add := func(policy string, shapes ...string) {
		for _, s := range shapes {
			if !slices.Contains(out[policy], s) {
				out[policy] = append(out[policy], s)
			}
		}
	}
	if p := cfg.Proxy; p != nil {
		for _, r := range p.Routes {
			for _, rl := range r.Limits {
				add(rl.Policy, keyShapes(rl.Key, rl.TierHeader, r.Name)...)
			}
		}
	}
	if e := cfg.Envoy; e != nil && e.Rules != nil {
		for policy, shapes := range e.Rules.KeyShapes() {
			add(policy, shapes...)
		}
	}
	if pg := cfg.Postgres; pg != nil {
		add(config.PolicyPostgresGlobal, "global")
		add(config.PolicyPostgresPerUser, admin.ShapeAny)
		add(config.PolicyPostgresPerIP, admin.ShapeAddress)
		add(config.PolicyPostgresConnPerUser, admin.ShapeAny)
		add(config.PolicyPostgresConnPerIP, admin.ShapeAddress)
	}
	return out
}
