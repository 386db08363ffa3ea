package daemon

import (
	"crypto/tls"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/pgproxy"
)

// The policies of the postgres listener's levels, as
// config.FloodgatePolicies names them.
const (
	pgGlobal      = "postgres.global"
	pgPerUser     = "postgres.per_user"
	pgPerIP       = "postgres.per_ip"
	pgConnPerUser = "postgres.connections.per_user"
	pgConnPerIP   = "postgres.connections.per_ip"
)

// postgresLimits maps the configured levels onto the proxy's scopes.
func postgresLimits(pg *config.Postgres, limiters map[string]floodgate.Limiter) pgproxy.Limits {
	scope := func(l *config.PostgresLimit, policy string) pgproxy.Scope {
		if l == nil {
			return pgproxy.Scope{}
		}
		return pgproxy.Scope{Limiter: limiters[policy], MaxWait: l.MaxWait.D()}
	}
	rl := pg.RateLimit
	l := pgproxy.Limits{
		Global:  scope(rl.Global, pgGlobal),
		PerUser: scope(rl.PerUser, pgPerUser),
		PerIP:   scope(rl.PerIP, pgPerIP),
	}
	if pg.Connections.PerUser != nil {
		l.Connections.PerUser = limiters[pgConnPerUser]
	}
	if pg.Connections.PerIP != nil {
		l.Connections.PerIP = limiters[pgConnPerIP]
	}
	return l
}

// newPostgres builds the PostgreSQL proxy of g's configuration, or nil.
func (d *Daemon) newPostgres(g *generation) (*pgproxy.Proxy, error) {
	pg := g.cfg.Postgres
	if pg == nil {
		return nil, nil
	}
	c := pgproxy.Config{Listen: pg.Listen, Upstream: pg.Upstream, Limits: postgresLimits(pg, g.limiters), Logger: d.log,
		ChargeEmptyQuery: pg.ChargeEmptyQuery, Replication: pg.Replication}
	var err error
	if c.ProxyProtocolFrom, err = clientip.ParsePrefixes(pg.ProxyProtocolFrom); err != nil {
		return nil, fmt.Errorf("postgres.proxy_protocol_from: %w", err)
	}
	if pg.UpstreamTLS != nil {
		if c.UpstreamTLS, err = clientTLS("postgres.upstream_tls", pg.UpstreamTLS); err != nil {
			return nil, err
		}
	}
	if pg.TLS != nil {
		cert, err := tls.LoadX509KeyPair(pg.TLS.Cert, pg.TLS.Key)
		if err != nil {
			return nil, fmt.Errorf("postgres.tls: %w", err)
		}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	p, err := pgproxy.New(c)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := d.reg.Register(p); err != nil {
		return nil, fmt.Errorf("postgres metrics: %w", err)
	}
	return p, nil
}
