package pgproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// A scopeID names a level of limits, in the order they are checked.
type scopeID = Level

const (
	scopeGlobal         = LevelGlobal
	scopeUser           = LevelUser
	scopeIP             = LevelIP
	numScopes   scopeID = 3
	scopeNone           = numScopes // no scope denied
)

// label is the scope's name in messages to clients.
func (s scopeID) label() string {
	switch s {
	case scopeGlobal:
		return "global"
	case scopeUser:
		return "per-user"
	case scopeIP:
		return "per-client-address"
	}
	return "unknown"
}

// An admission is a connection's side of the limits: who the client is
// (its user and per-IP key), the limiters of the decision at hand, the
// buffers AllowAll is called with, and the concurrent-query slot it holds
// (slot.go). It decides, counts and words a refusal; the conn does the I/O
// around it (waiting for the server's answers, waiting in line, replying).
// Its zero value, with user and ipKey set, is ready.
type admission struct {
	obs        Observer
	user       string                       // the startup parameter user
	ipKey      string                       // the client's per-IP key (clientip's)
	lims       [numScopes]floodgate.Limiter // by scope, set before each decision; nil skips the scope
	checkBuf   [numScopes]floodgate.Check
	checkScope [numScopes]scopeID // the scope of each check passed to AllowAll
	slot       slot               // the connection's concurrent-query slot (slot.go)
}

// forQueries sets the limiters of a query's decision from l and reports
// whether any scope limits queries.
func (a *admission) forQueries(l *Limits) bool {
	a.lims = [numScopes]floodgate.Limiter{l.Global.Limiter, l.PerUser.Limiter, l.PerIP.Limiter}
	return l.Global.Limiter != nil || l.PerUser.Limiter != nil || l.PerIP.Limiter != nil
}

// forConnection sets the limiters of a new connection's decision from l
// and reports whether any limits connections.
func (a *admission) forConnection(l ConnLimits) bool {
	a.lims = [numScopes]floodgate.Limiter{scopeUser: l.PerUser, scopeIP: l.PerIP}
	return l.PerUser != nil || l.PerIP != nil
}

// allow charges one unit under each scope that has a limiter, all or
// nothing. denied is the scope that denied or failed, scopeNone when all
// passed.
func (a *admission) allow(ctx context.Context) (res floodgate.Result, denied scopeID, err error) {
	checks := a.checkBuf[:0]
	for i, lim := range a.lims {
		if lim == nil {
			continue
		}
		a.checkScope[len(checks)] = scopeID(i)
		checks = append(checks, floodgate.Check{Limiter: lim, Key: a.key(scopeID(i)), Cost: 1})
	}
	if len(checks) == 0 {
		return floodgate.Result{Allowed: true}, scopeNone, nil
	}
	res, i, err := floodgate.AllowAll(ctx, checks...)
	if err == nil && res.Allowed {
		return res, scopeNone, nil
	}
	if i < 0 || i >= len(checks) { // not AllowAll's contract; blame the first
		i = 0
	}
	return res, a.checkScope[i], err
}

// countAllowed reports a query every scope passed, once per scope that
// has a limiter.
func (a *admission) countAllowed() {
	for i := range a.lims {
		if a.lims[i] != nil {
			a.obs.QueryChecked(scopeID(i), Allowed)
		}
	}
}

func (a *admission) key(s scopeID) string { return scopeKey(s, a.user, a.ipKey) }

// scopeKey is a scope's key for a client: the one rule of how the proxy
// keys its checks, which admission.key and Explain both read.
func scopeKey(s scopeID, user, ipKey string) string {
	switch s {
	case scopeGlobal:
		return GlobalKey
	case scopeUser:
		return user
	}
	return ipKey
}

// ipKey is the per-IP key of a client: clientip's key of its address
// (IPv6 by /64, IPv4 written in IPv6 as IPv4, "unknown" when there is no
// address), the key the listener's connection bound uses too.
func ipKey(a netip.Addr) string { return (*clientip.Resolver)(nil).AddrKey(a) }

// redactIP hides the host part of an address in logs: the last octet of an
// IPv4 address, all but the /48 of an IPv6 one.
func redactIP(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is4() {
		s := a.String()
		return s[:strings.LastIndexByte(s, '.')] + ".x"
	}
	p, _ := a.Prefix(48)
	return strings.TrimSuffix(p.Addr().String(), "::") + ":x"
}

// retryText renders a RetryAfter for a client, rounded up to a millisecond.
func retryText(d time.Duration) string {
	if d == floodgate.RetryNever {
		return "never (the cost is above the limit's burst)"
	}
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// A sampler keeps log lines about rejections to one per interval, counting
// those it drops.
type sampler struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (s *sampler) log(p *Proxy, level slog.Level, msg string, args ...any) {
	if !p.log.Enabled(context.Background(), level) {
		return
	}
	iv := p.cfg.RejectLogInterval
	s.mu.Lock()
	now := time.Now()
	if iv > 0 && !s.last.IsZero() && now.Sub(s.last) < iv {
		s.dropped++
		s.mu.Unlock()
		return
	}
	dropped := s.dropped
	s.last, s.dropped = now, 0
	s.mu.Unlock()
	if dropped > 0 {
		args = append(args, "unlogged_since_last", dropped)
	}
	p.log.Log(context.Background(), level, msg, args...)
}

// who names the key of scope in a message to the client.
func (a *admission) who(scope scopeID) string {
	switch scope {
	case scopeUser:
		return fmt.Sprintf(" for user %q", a.user)
	case scopeIP:
		return " for your client address"
	}
	return ""
}

// rejection builds the ErrorResponse of a query rejected by scope.
func (a *admission) rejection(scope scopeID, res floodgate.Result, failed bool) pgwire.ErrorResponse {
	e := pgwire.ErrorResponse{Severity: "ERROR", Code: "53400", Message: "rate limit exceeded"}
	who := a.who(scope)
	switch {
	case failed:
		e.Detail = fmt.Sprintf("The %s query rate limit%s could not be checked, and the proxy does not run queries it cannot check.", scope.label(), who)
		e.Hint = "The rate limiter's store is unavailable; retry later. The session is still usable."
	case res.Source == floodgate.SourceFailClosed:
		e.Detail = fmt.Sprintf("The %s query rate limit%s is unavailable, and its failure policy refuses queries.", scope.label(), who)
		e.Hint = "The rate limiter's store is unavailable; retry later. The session is still usable."
	default:
		e.Detail = fmt.Sprintf("The %s query rate limit%s is reached (%s); retry in %s.", scope.label(), who, res.Limit, retryText(res.RetryAfter))
		e.Hint = "Send queries more slowly, or ask for a higher limit. The query was not run; the session is still usable."
	}
	return e
}
