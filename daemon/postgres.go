package daemon

import (
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/certfile"
	"github.com/floodgate-go/floodgate/internal/denylog"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/pgproxy"
)

// postgresLimits maps the configured levels onto the proxy's scopes. They
// are Local when every level's policy is on the memory engine, so that
// the proxy's event loops decide queries where they read them.
func (d *Daemon) postgresLimits(pg *config.Postgres, g *generation) pgproxy.Limits {
	limiters, leases := g.limiters, g.cfg.Leases()
	local := true
	scope := func(l *config.PostgresLimit, policy string) pgproxy.Scope {
		if l == nil {
			return pgproxy.Scope{}
		}
		if _, mem := d.engine.storeFor(leases, policy).(*memstore.Store); !mem {
			local = false
		}
		return pgproxy.Scope{Limiter: limiters[policy], MaxWait: l.MaxWait.D()}
	}
	rl := pg.RateLimit
	l := pgproxy.Limits{
		Global:  scope(rl.Global, config.PolicyPostgresGlobal),
		PerUser: scope(rl.PerUser, config.PolicyPostgresPerUser),
		PerIP:   scope(rl.PerIP, config.PolicyPostgresPerIP),
		Local:   local,
	}
	if pg.Connections.PerUser != nil {
		l.Connections.PerUser = limiters[config.PolicyPostgresConnPerUser]
	}
	if pg.Connections.PerIP != nil {
		l.Connections.PerIP = limiters[config.PolicyPostgresConnPerIP]
	}
	l.ConcurrentQueries = g.pgConc
	return l
}

// newPostgres builds the PostgreSQL proxy of g's configuration; an error
// comes with the path of the field it is about.
func (d *Daemon) newPostgres(g *generation) (*pgproxy.Proxy, string, error) {
	pg := g.cfg.Postgres
	obs, err := metrics.NewPostgres(d.reg, metrics.PostgresOptions{})
	if err != nil {
		return nil, "postgres", err
	}
	c := pgproxy.Config{Listen: pg.Listen, Upstream: pg.Upstream, Limits: d.postgresLimits(pg, g), Logger: d.log, Observer: obs,
		ChargeEmptyQuery: pg.ChargeEmptyQuery, Replication: pg.Replication, StartupTimeout: pg.Bounds.HeaderTimeout.D()}
	if c.ProxyProtocolFrom, err = clientip.ParsePrefixes(pg.ProxyProtocolFrom); err != nil {
		return nil, "postgres.proxy_protocol_from", err
	}
	if pg.UpstreamTLS != nil {
		if c.UpstreamTLS, err = clientTLS(pg.UpstreamTLS); err != nil {
			return nil, "postgres.upstream_tls", err
		}
	}
	if pg.TLS != nil {
		// The same certificate files as the proxy's: a rotated pair is
		// served from the next connection on.
		pair, err := certfile.Load(pg.TLS.Cert, pg.TLS.Key, "postgres", &denylog.Errors{Log: d.log})
		if err != nil {
			return nil, "postgres.tls", err
		}
		if c.TLS, err = withClientCA(pair.TLSConfig(), pg.TLS.ClientCA); err != nil {
			return nil, "postgres.tls.client_ca", err
		}
	}
	p, err := pgproxy.New(c)
	if err != nil {
		return nil, "postgres", err
	}
	return p, "", nil
}
