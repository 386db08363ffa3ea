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
)

// A scopeID names a level of limits, in the order they are checked.
type scopeID uint8

const (
	scopeGlobal scopeID = iota
	scopeUser
	scopeIP
	numScopes
	scopeNone = numScopes // no scope denied
)

// String is the scope's name in metrics and logs.
func (s scopeID) String() string {
	switch s {
	case scopeGlobal:
		return "global"
	case scopeUser:
		return "user"
	case scopeIP:
		return "ip"
	}
	return "none"
}

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

// A scopeCheck is a Limiter that notes in hit which scope denied or failed,
// so that the one call to floodgate.AllowAll tells the proxy whom to blame.
// Each conn owns one per scope; lim is set before each decision.
type scopeCheck struct {
	lim   floodgate.Limiter
	scope scopeID
	hit   *scopeID
}

func (s *scopeCheck) Allow(ctx context.Context, key string) (floodgate.Result, error) {
	return s.AllowN(ctx, key, 1)
}

func (s *scopeCheck) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	res, err := s.lim.AllowN(ctx, key, cost)
	if err != nil || !res.Allowed {
		*s.hit = s.scope
	}
	return res, err
}

func (s *scopeCheck) RefundN(ctx context.Context, key string, cost int64) error {
	return s.lim.RefundN(ctx, key, cost)
}

func (s *scopeCheck) Reset(ctx context.Context, key string) error { return s.lim.Reset(ctx, key) }

// allow charges one unit under each scope whose check has a limiter, all or
// nothing. denied is the scope that denied or failed, scopeNone when all
// passed.
func (c *conn) allow(ctx context.Context) (res floodgate.Result, denied scopeID, err error) {
	checks := c.checkBuf[:0]
	for i := range c.checks {
		if c.checks[i].lim == nil {
			continue
		}
		checks = append(checks, floodgate.Check{Limiter: &c.checks[i], Key: c.key(scopeID(i)), Cost: 1})
	}
	if len(checks) == 0 {
		return floodgate.Result{Allowed: true}, scopeNone, nil
	}
	c.decided = scopeNone
	res, err = floodgate.AllowAll(ctx, checks...)
	if err == nil && res.Allowed {
		return res, scopeNone, nil
	}
	if c.decided == scopeNone { // cannot happen with a Limiter that keeps its contract
		c.decided = scopeGlobal
	}
	return res, c.decided, err
}

func (c *conn) key(s scopeID) string {
	switch s {
	case scopeGlobal:
		return GlobalKey
	case scopeUser:
		return c.params.user
	}
	return c.ipKey
}

// ipKey is the per-IP key of a client: its address, or its /64 for IPv6,
// since one host usually holds a whole /64 and could otherwise rotate
// through it to escape its limit.
func ipKey(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

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

// rejection builds the ErrorResponse of a query rejected by scope.
func (c *conn) rejection(scope scopeID, res floodgate.Result, failed bool) pgError {
	e := pgError{severity: "ERROR", code: "53400", message: "rate limit exceeded"}
	who := ""
	switch scope {
	case scopeUser:
		who = fmt.Sprintf(" for user %q", c.params.user)
	case scopeIP:
		who = " for your client address"
	}
	switch {
	case failed:
		e.detail = fmt.Sprintf("The %s query rate limit%s could not be checked, and the proxy does not run queries it cannot check.", scope.label(), who)
		e.hint = "The rate limiter's store is unavailable; retry later. The session is still usable."
	case res.Source == floodgate.SourceFailClosed:
		e.detail = fmt.Sprintf("The %s query rate limit%s is unavailable, and its failure policy refuses queries.", scope.label(), who)
		e.hint = "The rate limiter's store is unavailable; retry later. The session is still usable."
	default:
		e.detail = fmt.Sprintf("The %s query rate limit%s is reached (%s); retry in %s.", scope.label(), who, res.Limit, retryText(res.RetryAfter))
		e.hint = "Send queries more slowly, or ask for a higher limit. The query was not run; the session is still usable."
	}
	return e
}
