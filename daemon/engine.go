package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/internal/certfile"
	leasestore "github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/redisstore"
)

// An engine is the store a configuration's storage section describes, with
// what must be closed when it is replaced.
type engine struct {
	store   floodgate.Store
	remote  bool
	guard   *failover.Guard // nil for the memory engine
	client  redis.UniversalClient
	creds   atomic.Pointer[credentials] // Redis's user and password, which a reload may rotate
	closers []func() error

	// leased leases from Redis for the policies with lease: auto (redis
	// and hybrid engines): over store with the redis engine, over the
	// Guard under the hybrid engine's filter. leasing is the store those
	// policies decide on: leased itself, or a hybrid store whose global
	// part it is. leaseCaps maps the policies to their lease_max (0: the
	// default) in the configuration in service.
	leased    *leasestore.Store
	leasing   floodgate.Store
	leaseCaps atomic.Pointer[map[string]int64]
}

// storeFor returns the store of policy name, given the leasing policies
// of its configuration (config.Leases): the leasing one when the policy
// leases and the engine can.
func (e *engine) storeFor(leases map[string]int64, name string) floodgate.Store {
	if _, ok := leases[name]; ok && e.leasing != nil {
		return e.leasing
	}
	return e.store
}

// setLeases records which policies of c lease, and their caps.
func (e *engine) setLeases(c *config.Config) {
	caps := c.Leases()
	e.leaseCaps.Store(&caps)
}

// leaseCap is lease.Options.Cap: a policy not leasing in the
// configuration in service (one removed by a reload) leases nothing.
func (e *engine) leaseCap(policy string) int64 {
	if caps := e.leaseCaps.Load(); caps != nil {
		if c, ok := (*caps)[policy]; ok {
			return c
		}
	}
	return -1
}

// credentials are what new connections to Redis authenticate with.
type credentials struct{ username, password string }

// setCredentials makes new connections to Redis authenticate as r says
// (a rotated password_file); connections already open stay as they are.
func (e *engine) setCredentials(r *config.Redis) {
	if r != nil {
		e.creds.Store(&credentials{r.Username, r.Password})
	}
}

// newEngine builds the store of st, registering its collectors with m under
// the engine names "memory", "local" and "redis". A daemon builds its
// engine once: the storage section cannot change by a reload. A clock
// (Options.Clock) makes it a memory engine on that clock, whatever st says.
func newEngine(st config.Storage, clock clock.Clock, m *metrics.Metrics, reg prometheus.Registerer, log *slog.Logger) (*engine, error) {
	e := &engine{remote: st.Remote() && clock == nil}
	mem := func(name string) *memstore.Store {
		s := memstore.New(memstore.Options{MaxKeys: st.Memory.MaxKeys, Clock: clock})
		e.closers = append(e.closers, s.Close)
		_ = m.WatchMemory(name, s)
		return s
	}
	if st.Engine == config.EngineMemory || st.Engine == "" || clock != nil {
		e.store = mem("memory")
		return e, nil
	}
	e.setCredentials(st.Redis)
	client, err := redisClient(st.Redis, func() (string, string) {
		c := e.creds.Load()
		return c.username, c.password
	})
	if err != nil {
		return nil, err
	}
	e.client = client
	e.closers = append(e.closers, client.Close)
	// The Guard gives every call its deadline; the store's own bound, for
	// a call without one, is only a backstop.
	rs, err := redisstore.New(client, redisstore.Options{Prefix: st.Redis.KeyPrefix, Timeout: st.Failure.SlowTimeout.D()})
	if err != nil {
		e.close()
		return nil, err
	}
	e.closers = append([]func() error{rs.Close}, e.closers...)
	gopts := m.GuardOptions("redis", failover.GuardOptions{
		Timeout:     st.Failure.Timeout.D(),
		SlowTimeout: st.Failure.SlowTimeout.D(),
		FailureRate: st.Failure.Breaker.FailureRate,
		MinCalls:    st.Failure.Breaker.MinCalls,
		Window:      st.Failure.Breaker.Window.D(),
		Backoff:     st.Failure.Breaker.Backoff.D(),
		MaxBackoff:  st.Failure.Breaker.MaxBackoff.D(),
		// redisstore returns when the call's context ends or its
		// deadline passes, whether or not Done closes then.
		DeadlineBound: true,
		// Operators learn that Redis went away, why the breaker thinks so,
		// and what floodgate does about it, from the log too, not only
		// from a metric: once per outage, not once per probe.
		OnTransition: failover.LogTransitions(log, "Redis", outageMode(st), "engine", "redis", "failure_mode", failureMode(st)),
	})
	// The Guard's Breaker carries the concurrency limits' leases too, so
	// that one breaker judges Redis for both.
	guard, err := failover.NewGuard(rs, gopts)
	if err != nil {
		e.close()
		return nil, err
	}
	e.guard = guard
	_ = m.WatchGuard("redis", guard)
	switch st.Engine {
	case config.EngineHybrid:
		// Leasing policies share the filter (the same shares under the
		// same limit sets) and lease the global part from the Guard.
		local, ho := mem("local"), hybrid.Options{Fraction: st.Hybrid.Fraction()}
		e.store, err = hybrid.New(local, guard, ho)
		if err == nil {
			err = e.newLease(reg, guard)
		}
		if err == nil {
			e.leasing, err = hybrid.New(local, e.leased, ho)
		}
	default:
		o := failover.Options{Mode: st.Failure.Mode}
		if o.Mode == failover.LocalFallback {
			o.Local = mem("local")
		}
		e.store, err = failover.New(guard, o)
		if err == nil {
			err = e.newLease(reg, e.store)
			e.leasing = e.leased
		}
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// newLease makes the store that leases from remote for the policies that
// lease. Over the failover store, blocks are taken through its Guard and
// what they cannot cover is decided by the failover store, failure mode
// included; over the hybrid engine's Guard, what they cannot cover goes to
// the Guard, and the hybrid store falls back on its filter. It is closed
// before the Redis store, so that its unused units go back.
func (e *engine) newLease(reg prometheus.Registerer, remote floodgate.Store) error {
	obs, err := metrics.NewLease(reg, metrics.LeaseOptions{})
	if err != nil {
		return err
	}
	ls, err := leasestore.New(remote, leasestore.Options{Cap: e.leaseCap, Observer: obs})
	if err != nil {
		return err
	}
	obs.Watch(ls)
	e.leased = ls
	e.closers = append([]func() error{ls.Close}, e.closers...)
	return nil
}

// redisClient opens the client the configuration describes. Every command
// has a deadline from its context (ContextTimeoutEnabled), so a stalled
// Redis costs a decision its failure timeout, not the socket's. A
// connection is dialled once (DialerRetries 1), not five times 100 ms
// apart: a refused connection then fails its decision at once, and the
// breaker, which opens after failover.UnreachableInRow of them, is the
// only one to try again. New connections authenticate with what creds
// returns at the time.
func redisClient(r *config.Redis, creds func() (username, password string)) (redis.UniversalClient, error) {
	if r == nil {
		return nil, errors.New("storage.redis is required by the redis and hybrid engines")
	}
	var tlsConf *tls.Config
	if r.TLS != nil {
		var err error
		if tlsConf, err = clientTLS(r.TLS); err != nil {
			return nil, err
		}
	}
	o := &redis.UniversalOptions{
		Addrs:                 r.Addrs,
		MasterName:            r.MasterName,
		SentinelUsername:      r.SentinelUsername,
		SentinelPassword:      r.SentinelPassword,
		CredentialsProvider:   creds,
		DB:                    r.DB,
		TLSConfig:             tlsConf,
		PoolSize:              r.PoolSize,
		DialTimeout:           r.DialTimeout.D(),
		DialerRetries:         1,
		ReadTimeout:           r.ReadTimeout.D(),
		WriteTimeout:          r.WriteTimeout.D(),
		ContextTimeoutEnabled: true,
	}
	switch r.Mode {
	case config.RedisCluster:
		return redis.NewClusterClient(o.Cluster()), nil
	case config.RedisSentinel:
		return redis.NewFailoverClient(o.Failover()), nil
	}
	return redis.NewClient(o.Simple()), nil
}

// clientTLS is the tls.Config of a connection floodgate makes.
func clientTLS(t *config.ClientTLS) (*tls.Config, error) {
	c := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CA != "" {
		pool, err := certfile.Pool(t.CA)
		if err != nil {
			return nil, fmt.Errorf("ca: %w", err)
		}
		c.RootCAs = pool
	}
	if t.Cert != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("cert/key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ready reports whether the engine can serve: the memory engine always
// can; a remote engine when Redis answers, or when its failure mode serves
// without it (every mode but fail_closed, and hybrid's local filter).
func (e *engine) ready(ctx context.Context, st config.Storage) error {
	if !e.remote {
		return nil
	}
	err := e.client.Ping(ctx).Err()
	if err == nil || st.Engine == config.EngineHybrid || st.Failure.Mode != failover.FailClosed {
		return nil
	}
	return fmt.Errorf("redis is unreachable and the failure mode is fail_closed: %w", err)
}

// Warnings returns what is wrong with the daemon's surroundings rather than
// its configuration, for floodgate validate to print without failing: that
// the configured Redis cannot be reached within ctx (serve starts all the
// same and decides by its failure mode until Redis is back).
func (d *Daemon) Warnings(ctx context.Context) []string {
	e := d.engine
	if !e.remote {
		return nil
	}
	st := d.cur.Load().cfg.Storage
	if err := e.client.Ping(ctx).Err(); err != nil {
		return []string{fmt.Sprintf("storage.redis: %s cannot be reached (%v); serve starts all the same, %s until it can",
			strings.Join(st.Redis.Addrs, ", "), err, failover.OutageText("Redis", outageMode(st)))}
	}
	return nil
}

func (e *engine) close() {
	for _, c := range e.closers {
		_ = c()
	}
}

// outageMode is the failure mode that decides while Redis is down: the
// hybrid engine's local filter limits per instance, as LocalFallback does.
func outageMode(st config.Storage) failover.Mode {
	if st.Engine == config.EngineHybrid {
		return failover.LocalFallback
	}
	return st.Failure.Mode
}

// failureMode names what decides while Redis is down.
func failureMode(st config.Storage) string {
	if st.Engine == config.EngineHybrid {
		return "local_fallback (the hybrid engine's local filter)"
	}
	b, _ := st.Failure.Mode.MarshalText()
	return string(b)
}
