package config

import (
	"time"

	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/internal/yamlpos"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/pgproxy/pgmode"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/tokencost"

	"github.com/floodgate-go/floodgate/clientip"
)

// Config is one floodgate configuration file. Its structs map one-to-one
// onto the YAML: each field's yaml tag is its name in the file, and its
// comment says what it means and what an absent field defaults to.
//
// Top-level fields whose names start with "x-" are ignored, so that a file
// can define YAML anchors there for the fields below to use:
//
//	x-strict: &strict {rate: 5/min, algorithm: sliding_window}
//	policies:
//	  login: *strict
//
// A Config returned by Parse or Load is complete: defaults are filled in,
// relative file names are resolved against the file's directory, secrets
// read from their files, and every field validated.
type Config struct {
	// Storage is where limit state lives.
	Storage Storage `yaml:"storage"`

	// Policies are the named limits that routes, the check API and the
	// PostgreSQL proxy refer to. Names are lower-case letters, digits, _
	// and -; they appear in RateLimit-Policy headers, metrics and engine
	// keys, so renaming a policy starts its counts afresh.
	Policies map[string]PolicySpec `yaml:"policies,omitempty"`

	// Proxy is the rate-limiting reverse proxy. Absent: no proxy.
	Proxy *Proxy `yaml:"proxy,omitempty"`

	// Check is the decision API (POST /v1/check). Absent: off.
	Check *CheckAPI `yaml:"check,omitempty"`

	// Envoy is the Envoy rate limit service (gRPC). Absent: off.
	Envoy *Envoy `yaml:"envoy,omitempty"`

	// Postgres is the rate-limiting PostgreSQL proxy. Absent: off.
	Postgres *Postgres `yaml:"postgres,omitempty"`

	// Admin is the operators' listener: /metrics, /healthz, /readyz, the
	// effective configuration and the status page. Absent: on, at
	// 127.0.0.1:9090.
	Admin *Admin `yaml:"admin,omitempty"`

	// Log configures the daemon's log/slog output.
	Log Log `yaml:"log"`

	// Telemetry exports the daemon's metrics and a span per decision by
	// OpenTelemetry's OTLP. Absent: off, and nothing of OpenTelemetry runs.
	Telemetry *Telemetry `yaml:"telemetry,omitempty"`

	// ShutdownTimeout bounds how long a stopping daemon (SIGTERM, ^C) waits
	// for in-flight requests and sessions to finish; what is still running
	// then is cut off. The process exits within ShutdownDelay +
	// ShutdownTimeout. Default 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`

	// ShutdownDelay is how long a stopping daemon keeps serving with
	// /readyz failing before it closes its listeners, so that a load
	// balancer that polls readiness (a Kubernetes Service) stops sending
	// new connections first. Default 0; a few seconds behind such a
	// balancer.
	ShutdownDelay Duration `yaml:"shutdown_delay"`

	// File is the name the configuration was parsed under.
	File string `yaml:"-"`

	// Digest is a hex SHA-256 of the file and of every file it refers to
	// (Envoy configurations, secret files): equal digests, equal inputs.
	// It names a configuration's version in logs, metrics and the status
	// page without showing its secrets.
	Digest string `yaml:"-"`

	pos map[string]Pos
}

// Position returns where the field at path (e.g. "proxy.routes[0].match")
// is set in the file, or the nearest enclosing field that is, so that
// errors found later (a listener that cannot bind) can point at the line
// to fix.
func (c *Config) Position(path string) Pos {
	return yamlpos.LookupPos(c.pos, c.File, path)
}

// Defaults of fields that the structs below name.
const (
	DefaultProxyListen     = ":8080"
	DefaultCheckListen     = "127.0.0.1:8081"
	DefaultEnvoyListen     = "127.0.0.1:8082"
	DefaultPostgresListen  = "127.0.0.1:6432"
	DefaultAdminListen     = "127.0.0.1:9090"
	DefaultRedisAddr       = "127.0.0.1:6379"
	DefaultDialTimeout     = time.Second
	DefaultIOTimeout       = 500 * time.Millisecond
	DefaultShutdownTimeout = 10 * time.Second

	// The defaults of every listener's bounds: see Bounds.
	DefaultMaxConnections          = 4096
	DefaultMaxConnectionsPerClient = 256
	DefaultMaxHeaderBytes          = 32 << 10
	DefaultHeaderTimeout           = 10 * time.Second
	DefaultBodyTimeout             = time.Minute
	DefaultIdleTimeout             = 2 * time.Minute
	DefaultMaxConcurrentStreams    = 100

	// The library's defaults, which the file's defaults are.
	DefaultMaxKeys           = memstore.DefaultMaxKeys
	DefaultKeyPrefix         = redisstore.DefaultPrefix
	DefaultFailureTimeout    = failover.DefaultTimeout
	DefaultSlowTimeout       = failover.DefaultSlowTimeout
	DefaultFailureRate       = failover.DefaultFailureRate
	DefaultBreakerMinCalls   = failover.DefaultMinCalls
	DefaultBreakerWindow     = failover.DefaultWindow
	DefaultBreakerBackoff    = failover.DefaultBackoff
	DefaultBreakerMaxBackoff = failover.DefaultMaxBackoff
	DefaultHeadroom          = hybrid.DefaultHeadroom
	DemoUpstream             = "demo"
	defaultEnvoyAlgorithm    = "fixed_window"
)

func (c *Config) setDefaults() {
	c.Storage.setDefaults()
	c.Admin = &Admin{}
	c.Admin.setDefaults()
	c.Log.setDefaults()
	c.ShutdownTimeout = Duration(DefaultShutdownTimeout)
}

// An Engine names where limit state is kept.
type Engine string

// The engines.
const (
	// EngineMemory keeps state in this process: fast, lost on restart,
	// and per instance (N instances admit N times the limit).
	EngineMemory Engine = "memory"

	// EngineRedis keeps state in Redis, shared by every instance.
	EngineRedis Engine = "redis"

	// EngineHybrid filters with a local share of each limit and decides
	// in Redis; when Redis fails, the local verdict stands.
	EngineHybrid Engine = "hybrid"
)

// Storage selects and configures the engine.
type Storage struct {
	// Engine is memory (the default), redis or hybrid.
	Engine Engine `yaml:"engine"`

	// Memory configures the in-process engine, also used by the hybrid
	// engine's local filter and by local_fallback.
	Memory Memory `yaml:"memory"`

	// Redis is the Redis server or cluster; required by redis and hybrid.
	Redis *Redis `yaml:"redis,omitempty"`

	// Hybrid sizes the local filter of the hybrid engine.
	Hybrid *Hybrid `yaml:"hybrid,omitempty"`

	// Failure says what happens when Redis fails. Its mode is required for
	// the redis engine, because every choice is wrong for some limits.
	Failure Failure `yaml:"failure"`
}

func (s *Storage) setDefaults() {
	s.Engine = EngineMemory
	s.Memory.setDefaults()
	s.Failure.setDefaults()
}

// The values of a policy's lease.
const (
	LeaseOff  = "off"
	LeaseAuto = "auto"
)

// Leasing is whether a policy's decisions are answered from blocks of its
// budget leased from Redis (docs/leases.md), and how large a block may be.
// Policies, the PostgreSQL proxy's rate_limit levels and the Envoy rules
// (for every rule of the ratelimit_config files at once) each have one.
type Leasing struct {
	// Lease answers most decisions from blocks of the budget leased from
	// Redis, one call charging a block as its requests would be, so the
	// limit is never exceeded while Redis does a fraction of the work
	// (docs/leases.md): off (the default) or auto, which sizes each key's
	// block by its recent rate. The redis and hybrid engines lease (the
	// hybrid engine its global part); sliding_log limits never do.
	Lease string `yaml:"lease,omitempty"`

	// LeaseMax caps a leased block in units (with lease: auto). The units
	// a block holds are unavailable to other instances: with N instances
	// up to about 1.5 × N × lease_max units of a key's limit can be held
	// back. Default 1000; a block is also never above a tenth of the
	// smallest limit's capacity.
	LeaseMax int64 `yaml:"lease_max,omitempty"`
}

// Leased reports whether decisions are answered from leased blocks.
func (l *Leasing) Leased() bool { return l.Lease == LeaseAuto }

// Leases returns the policies of c that lease, by the names
// FloodgatePolicies gives them, with their lease_max (0: the default):
// leasing policies, PostgreSQL rate_limit levels, and every rule policy of
// the Envoy rules when envoy.lease is auto.
func (c *Config) Leases() map[string]int64 {
	out := map[string]int64{}
	for name, p := range c.Policies {
		if p.Leased() {
			out[name] = p.LeaseMax
		}
	}
	if pg := c.Postgres; pg != nil {
		for _, lv := range pg.RateLimit.levels() {
			if lv.limit != nil && lv.limit.Leased() {
				out[lv.policy] = lv.limit.LeaseMax
			}
		}
	}
	if e := c.Envoy; e != nil && e.Leased() && e.Rules != nil {
		for name := range e.Rules.Policies() {
			out[name] = e.LeaseMax
		}
	}
	return out
}

// Remote reports whether the engine keeps state outside the process.
func (s *Storage) Remote() bool { return s.Engine == EngineRedis || s.Engine == EngineHybrid }

// Memory configures the in-process engine.
type Memory struct {
	// MaxKeys bounds the entries kept (one per key and limit); when full,
	// the entries carrying the least debt are evicted. Default 2097152;
	// -1 means no bound.
	MaxKeys int `yaml:"max_keys"`
}

func (m *Memory) setDefaults() { m.MaxKeys = DefaultMaxKeys }

// A RedisMode says how to reach Redis.
type RedisMode string

// The Redis modes.
const (
	RedisStandalone RedisMode = "standalone"
	RedisSentinel   RedisMode = "sentinel"
	RedisCluster    RedisMode = "cluster"
)

// Redis configures the connection to Redis (standalone, Sentinel or
// Cluster).
type Redis struct {
	// Mode is standalone (the default), sentinel or cluster.
	Mode RedisMode `yaml:"mode"`

	// Addrs are host:port addresses: the server (standalone, exactly one),
	// the Sentinels, or some Cluster nodes. Default [127.0.0.1:6379].
	Addrs []string `yaml:"addrs"`

	// MasterName is the Sentinel master's name; required for sentinel.
	MasterName string `yaml:"master_name,omitempty"`

	// SentinelUsername and SentinelPassword authenticate to the Sentinels
	// when they require it.
	SentinelUsername string `yaml:"sentinel_username,omitempty"`
	SentinelPassword string `yaml:"sentinel_password,omitempty"`

	// Username is the ACL user; empty means the default user.
	Username string `yaml:"username,omitempty"`

	// Password authenticates to Redis. Write ${REDIS_PASSWORD} to take it
	// from the environment, or use PasswordFile; never commit it.
	Password string `yaml:"password,omitempty"`

	// PasswordFile is a file whose content (trailing newline removed) is
	// the password, e.g. a mounted Kubernetes secret. It is read at every
	// load, so a reload picks up a rotated secret. Exclusive with Password.
	PasswordFile string `yaml:"password_file,omitempty"`

	// DB is the database number (standalone and sentinel; cluster has
	// only 0). Default 0.
	DB int `yaml:"db"`

	// TLS turns on TLS to Redis. Absent: plain TCP.
	TLS *ClientTLS `yaml:"tls,omitempty"`

	// PoolSize is the number of connections per node; 0 means go-redis's
	// default (10 per CPU).
	PoolSize int `yaml:"pool_size"`

	// DialTimeout bounds establishing a connection. Default 1s.
	DialTimeout Duration `yaml:"dial_timeout"`

	// ReadTimeout and WriteTimeout bound socket reads and writes. Default
	// 500ms each. A decision's reads and writes wait at most the shorter of
	// these and failure.slow_timeout, so raise them with slow_timeout.
	ReadTimeout  Duration `yaml:"read_timeout"`
	WriteTimeout Duration `yaml:"write_timeout"`

	// KeyPrefix starts every key floodgate writes, so that applications
	// can share one Redis. Default "floodgate:". It may not contain { or },
	// which would break the hash tags that keep a policy's keys in one
	// Cluster slot.
	KeyPrefix string `yaml:"key_prefix"`
}

func (r *Redis) setDefaults() {
	r.Mode = RedisStandalone
	r.Addrs = []string{DefaultRedisAddr}
	r.DialTimeout = Duration(DefaultDialTimeout)
	r.ReadTimeout = Duration(DefaultIOTimeout)
	r.WriteTimeout = Duration(DefaultIOTimeout)
	r.KeyPrefix = DefaultKeyPrefix
}

// ClientTLS configures TLS to a server (Redis).
type ClientTLS struct {
	// CA is a PEM file of the certificates that may sign the server's;
	// empty means the system roots.
	CA string `yaml:"ca,omitempty"`

	// Cert and Key are a PEM client certificate and its key, for servers
	// that require one. Set both or neither.
	Cert string `yaml:"cert,omitempty"`
	Key  string `yaml:"key,omitempty"`

	// ServerName overrides the name checked in the server's certificate.
	ServerName string `yaml:"server_name,omitempty"`

	// InsecureSkipVerify turns off the server certificate check. For
	// tests only: anyone on the path can then read and change traffic.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify,omitempty"`
}

// ServerTLS configures TLS on a listener.
type ServerTLS struct {
	// Cert and Key are the PEM certificate (chain) and key; both required.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`

	// ClientCA, when set, requires clients to present a certificate signed
	// by one in this PEM file (mutual TLS).
	ClientCA string `yaml:"client_ca,omitempty"`
}

// Hybrid sizes the hybrid engine's local filter: either LocalFraction, or
// Instances (and optionally Headroom) from which the fraction follows.
type Hybrid struct {
	// LocalFraction is the share of every limit the local filter holds,
	// in (0, 1].
	LocalFraction float64 `yaml:"local_fraction,omitempty"`

	// Instances is the fewest replicas that share the limits; the fraction
	// is Headroom/Instances, at most 1.
	Instances int `yaml:"instances,omitempty"`

	// Headroom covers uneven load balancing when the fraction follows from
	// Instances. Default 2.
	Headroom float64 `yaml:"headroom,omitempty"`
}

// Fraction returns the local share of each limit: LocalFraction, or what
// hybrid.FractionFor makes of Instances and Headroom; 0 without a hybrid
// section, which the checker allows only when every policy gives local.
func (h *Hybrid) Fraction() float64 {
	if h == nil {
		return 0 // every policy gives its own local limits
	}
	if h.LocalFraction > 0 {
		return h.LocalFraction
	}
	return hybrid.FractionFor(h.Instances, h.Headroom)
}

// Failure is the failure policy of a remote engine.
type Failure struct {
	// Mode is fail_open (allow the request: availability over
	// protection), fail_closed (deny it; front ends answer 503, since the
	// limiter, not the client, failed) or local_fallback (decide in this
	// process with the same limits, so N instances admit up to N times the
	// limit while Redis is down). Required for the redis engine, because
	// every choice is wrong for some limits; the hybrid engine always falls
	// back on its local filter (local_fallback, its default and only mode).
	Mode failover.Mode `yaml:"mode,omitempty"`

	// Timeout is how long a call to Redis may take before it counts as
	// slow (floodgate_engine_slow_total). A slow call is still waited for,
	// up to slow_timeout, and its answer used: on a machine whose CPUs are
	// busy every call is late, which is not an outage. Default 100ms.
	Timeout Duration `yaml:"timeout"`

	// SlowTimeout bounds every call to Redis: a call unanswered by then is
	// a failure, decided by the mode and counted by the breaker. At least
	// timeout; set it equal to timeout to cut calls off at timeout.
	// Default 500ms.
	SlowTimeout Duration `yaml:"slow_timeout"`

	// Breaker stops calling Redis while most calls fail, so that an
	// outage costs a few timeouts rather than one per request.
	Breaker Breaker `yaml:"breaker"`
}

func (f *Failure) setDefaults() {
	f.Timeout = Duration(DefaultFailureTimeout)
	f.SlowTimeout = Duration(DefaultSlowTimeout)
	f.Breaker.setDefaults()
}

// Breaker configures the circuit breaker in front of Redis.
type Breaker struct {
	// FailureRate is the share of failed calls within window that opens
	// it, above 0 and at most 1. Default 0.5.
	FailureRate float64 `yaml:"failure_rate"`

	// MinCalls is how many calls window must hold before its failure rate
	// counts, so that a few errors after a quiet spell do not open it; as
	// many failures in a row that are not timeouts open it too.
	// Default 20; -1 disables the breaker. A daemon that makes fewer calls
	// per window never opens it: lower min_calls for a quiet one.
	MinCalls int `yaml:"min_calls"`

	// Window is how far back calls are counted. Default 10s.
	Window Duration `yaml:"window"`

	// Backoff is how long it stays open before one probe. Default 200ms;
	// doubled after each failed probe up to MaxBackoff.
	Backoff Duration `yaml:"backoff"`

	// MaxBackoff caps Backoff. Default 2s.
	MaxBackoff Duration `yaml:"max_backoff"`
}

func (b *Breaker) setDefaults() {
	b.FailureRate = DefaultFailureRate
	b.MinCalls = DefaultBreakerMinCalls
	b.Window = Duration(DefaultBreakerWindow)
	b.Backoff = Duration(DefaultBreakerBackoff)
	b.MaxBackoff = Duration(DefaultBreakerMaxBackoff)
}

// A LimitSpec is one limit as written in the file.
type LimitSpec struct {
	// Rate is units per period: "100/min", "10/s", "5 per hour"; see Rate.
	Rate Rate `yaml:"rate,omitempty"`

	// Burst is the most units that may pass at once (gcra and
	// token_bucket). 0 or absent means Rate's count.
	Burst int64 `yaml:"burst,omitempty"`

	// Algorithm is gcra (the default), token_bucket, fixed_window,
	// sliding_window or sliding_log.
	Algorithm string `yaml:"algorithm,omitempty"`

	// Align names a time zone ("America/New_York", "UTC") whose calendar
	// the windows follow, so a 1000/d limit resets at local midnight. It
	// implies fixed_window.
	Align string `yaml:"align,omitempty"`
}

// A LimitsSpec is a set of limits that must all pass: either the shorthand
// of one limit (rate, burst, algorithm, align) or a list under limits.
type LimitsSpec struct {
	LimitSpec `yaml:",inline"`

	// Limits are several limits that must all pass, e.g. 10/s and
	// 1000/h; a request denied by one is charged to none.
	Limits []LimitSpec `yaml:"limits,omitempty"`
}

// List returns the limits of s: the shorthand limit, or Limits.
func (s *LimitsSpec) List() []LimitSpec {
	if !s.Rate.IsZero() {
		return []LimitSpec{s.LimitSpec}
	}
	return s.Limits
}

// A PolicySpec is one entry of policies.
type PolicySpec struct {
	LimitsSpec `yaml:",inline"`

	// Local is what the hybrid engine's local filter lets through per
	// instance in place of the limits, one for each limit and in their
	// order (rate: 50/s, burst: 100 with local: {rate: 10/s, burst: 20}).
	// Each must be no larger than its limit. Absent: the filter holds
	// storage.hybrid's share of every limit. Overrides and tiers always
	// take that share. Only the hybrid engine has a local filter.
	Local *LimitsSpec `yaml:"local,omitempty"`

	Leasing `yaml:",inline"`

	// Penalty blocks a key for this long once the policy denies it
	// ("15m"): every request of the key is then refused (429, Retry-After
	// the penalty's end) without being charged, and the refusals do not
	// extend it. With count: failed, the attempt after the limit's failures
	// is the denial that starts it. The penalty is kept in the engine, so
	// every instance on one Redis sees it; a key reset lifts it. Between 1s
	// and 90 days; absent means no penalty. See docs/penalty.md.
	Penalty Duration `yaml:"penalty,omitempty"`

	// Description is free text for the status page and the effective
	// configuration.
	Description string `yaml:"description,omitempty"`

	// Overrides replace the limits for exact keys, written as the routes'
	// keys spell them (httplimit's key functions, so a Go service spells
	// them alike): "10.0.0.100" for key ip, "x-api-key:k-123" for key
	// header:X-API-Key, "user:batch_worker" for key user:X-User-ID (a
	// request without the header is keyed "ip:ADDRESS" instead),
	// "10.0.0.1|route:login" for [ip, route]. An override that gives
	// neither algorithm nor align takes the policy's (when the policy is
	// one limit).
	Overrides map[string]LimitsSpec `yaml:"overrides,omitempty"`

	// Tiers are alternative limit sets picked per request by a route
	// limit's tier_header (free, pro, ...). A request whose tier is
	// missing or unknown gets the policy's own limits. Like overrides, a
	// tier takes the policy's algorithm and align when it gives neither.
	Tiers map[string]LimitsSpec `yaml:"tiers,omitempty"`
}

// Proxy configures the rate-limiting reverse proxy.
type Proxy struct {
	// Listen is the address to serve on. Default ":8080".
	Listen string `yaml:"listen"`

	// Upstream is the service behind the proxy: an http:// or https:// URL,
	// or "demo" for a built-in echo service to try floodgate with.
	Upstream string `yaml:"upstream"`

	// TLS serves HTTPS. Absent: plain HTTP.
	TLS *ServerTLS `yaml:"tls,omitempty"`

	// ClientIP says who the client is behind load balancers.
	ClientIP ClientIP `yaml:"client_ip"`

	// UserTrustedFrom lists the peers (CIDRs or addresses) whose user
	// headers (key user:HEADER) and tier headers are believed, typically
	// the authenticating gateway. From anyone else those headers are
	// ignored and the request is keyed by client IP.
	UserTrustedFrom []string `yaml:"user_trusted_from,omitempty"`

	// Headers selects the rate-limit header fields of responses: all of
	// X-RateLimit-*, the IETF RateLimit fields and Retry-After by default.
	Headers httplimit.Headers `yaml:"headers"`

	// Body is the body of 429 responses: problem (RFC 9457
	// application/problem+json, the default), json or none.
	Body httplimit.Body `yaml:"body"`

	// Routes are tried in order and the first that matches a request
	// decides its limits. A request no route matches passes unlimited; end
	// with a route without match to limit everything else.
	Routes []Route `yaml:"routes,omitempty"`

	// Bounds limit what connections may hold of this listener: how many,
	// for how long, and how much of a request is buffered.
	Bounds Bounds `yaml:"bounds"`
}

func (p *Proxy) setDefaults() {
	p.Listen = DefaultProxyListen
	p.Bounds.defaults(boundsHTTP)
}

// ClientIP configures how the client's address is found; it maps onto
// clientip.Config. The default trusts no one: the client is the peer.
type ClientIP struct {
	// TrustedProxies are the proxies (CIDRs or addresses) allowed to
	// report the client's address.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`

	// Header is where they report it: X-Forwarded-For (the default once a
	// proxy is trusted), Forwarded, or a single-address header such as
	// X-Real-IP.
	Header string `yaml:"header,omitempty"`

	// TrustedHops trusts this many proxies by position instead of address
	// (e.g. 2 for a CDN then a load balancer). Default 0.
	TrustedHops int `yaml:"trusted_hops,omitempty"`

	// IPv4Prefix and IPv6Prefix group clients by network: defaults 32 (each
	// address) and 64 (a client cannot escape its limit by rotating
	// through its /64).
	IPv4Prefix int `yaml:"ipv4_prefix,omitempty"`
	IPv6Prefix int `yaml:"ipv6_prefix,omitempty"`
}

// Config returns c as a clientip.Config.
func (c ClientIP) Config() clientip.Config {
	return clientip.Config{
		TrustedProxies: c.TrustedProxies,
		Header:         c.Header,
		TrustedHops:    c.TrustedHops,
		IPv4Prefix:     c.IPv4Prefix,
		IPv6Prefix:     c.IPv6Prefix,
	}
}

// A Route selects requests and the limits they must pass.
type Route struct {
	// Name labels the route in metrics and logs and is the value of key
	// route. Default: derived from Match, e.g. "GET api.example.com/v1/*".
	Name string `yaml:"name"`

	// Match selects the requests; absent matches every request.
	Match httpmatch.Match `yaml:"match"`

	// Shadow decides and counts but never denies, to try limits on real
	// traffic first: requests that would be denied are logged and counted.
	Shadow bool `yaml:"shadow,omitempty"`

	// Limits must all pass; when one denies, none is charged. A route
	// without limits exempts its requests (health checks).
	Limits []RouteLimit `yaml:"limits,omitempty"`

	// Concurrency bounds how many of the route's requests are in flight
	// upstream at once, inside its limits: a request the limits refuse
	// never takes a slot. Absent: no bound.
	Concurrency *RouteConcurrency `yaml:"concurrency,omitempty"`

	// Tokens says how the limits with a cost of tokens:COUNT read an LLM
	// API call's tokens: estimated from the request body, settled from the
	// usage in the response body or event stream (docs/llm.md). Absent:
	// OpenAI's and Anthropic's shapes, every model weighing 1.
	Tokens *tokencost.Settings `yaml:"tokens,omitempty"`
}

// RouteConcurrency bounds a route's requests in flight (package
// concurrency, served as concurrency/throttle serves it). With storage
// memory the slots are this process's; with redis or hybrid they are
// leases in Redis shared by every instance, judged by the same circuit
// breaker as the rate limits.
type RouteConcurrency struct {
	// Limit is the number of requests in flight at once, per key. Exactly
	// one of limit and adaptive is set.
	Limit int `yaml:"limit,omitempty"`

	// Queue is the most requests that may wait for a slot of one key in
	// this process; a request beyond it is refused at once. Default 0: no
	// waiting, a request that finds its key full is refused.
	Queue int `yaml:"queue,omitempty"`

	// MaxWait is the longest a request waits in the queue before it is
	// refused. Default 1s (concurrency.DefaultMaxWait); used only with
	// queue.
	MaxWait Duration `yaml:"max_wait,omitempty"`

	// Key, when set, gives each key (the sources of a limit's key: ip,
	// header:NAME, user:NAME, route, global) slots of its own and refuses
	// with 429. Absent: the route's requests share the slots and a refusal
	// is 503, the upstream being at capacity.
	Key Key `yaml:"key,omitempty"`

	// Adaptive replaces limit by one that follows the upstream's latency
	// (gradient) or its failures (aimd).
	Adaptive *AdaptiveConcurrency `yaml:"adaptive,omitempty"`
}

// AdaptiveConcurrency configures an adaptive concurrency limit (package
// concurrency/adaptive); zero values take the package's defaults.
type AdaptiveConcurrency struct {
	// Algorithm is gradient (the limit follows the ratio of the baseline
	// latency to the measured one) or aimd (one more slot per round of
	// successes, a tenth fewer on a 429, 502, 503, 504 or timeout).
	Algorithm string `yaml:"algorithm"`

	// InitialLimit is the limit before anything is measured. Default 20.
	InitialLimit int `yaml:"initial_limit,omitempty"`

	// MinLimit and MaxLimit bound the limit. Defaults 3 and 1000.
	MinLimit int `yaml:"min_limit,omitempty"`
	MaxLimit int `yaml:"max_limit,omitempty"`

	// Tolerance (gradient) is how much slower than the baseline the
	// upstream may answer before the limit falls: 1.1 (the default) is 10%.
	Tolerance float64 `yaml:"tolerance,omitempty"`

	// Timeout (aimd) counts a response slower than this as a drop. Default
	// 0: only the failing statuses are drops.
	Timeout Duration `yaml:"timeout,omitempty"`
}

// The adaptive concurrency algorithms.
const (
	AdaptiveGradient = "gradient"
	AdaptiveAIMD     = "aimd"
)

// A RouteLimit applies one policy to a route's requests.
type RouteLimit struct {
	// Policy names an entry of policies.
	Policy string `yaml:"policy"`

	// Key is what the limit counts by: ip (the default), header:NAME,
	// user:NAME, route, global, or a list of them for a composite key.
	Key Key `yaml:"key"`

	// Cost is the units a request costs: a whole number (default 1),
	// header:NAME, response_header:NAME, or tokens:input, tokens:output,
	// tokens:total (an LLM API call's tokens; see the route's tokens).
	Cost Cost `yaml:"cost"`

	// Count is which responses the charge stands for: all (the default),
	// failed (status 400 or more: a login limit that counts failed
	// attempts) or successful (below 400).
	Count httplimit.Count `yaml:"count"`

	// TierHeader names a request header whose value picks one of the
	// policy's tiers. Believed only from proxy.user_trusted_from.
	TierHeader string `yaml:"tier_header,omitempty"`
}

func (l *RouteLimit) setDefaults() {
	l.Key = Key{{Source: KeyIP}}
	l.Cost = Cost{Units: 1}
}

// CheckAPI configures the decision API: POST /v1/check with a policy, key and
// cost, answered with the decision.
type CheckAPI struct {
	// Listen is the address to serve on. Default "127.0.0.1:8081".
	Listen string `yaml:"listen"`

	// Token, when set, is required as "Authorization: Bearer TOKEN". Use
	// ${CHECK_TOKEN} or TokenFile to keep it out of the file.
	Token string `yaml:"token,omitempty"`

	// TokenFile is a file holding the token; exclusive with Token.
	TokenFile string `yaml:"token_file,omitempty"`

	// AllowedHosts are the names, besides IP addresses and localhost,
	// requests may give as their Host (e.g. check.internal); others are
	// refused, so that a web page whose name an attacker points at this
	// listener (DNS rebinding) cannot spend anyone's budget. Off loopback
	// the check API needs a token.
	AllowedHosts []string `yaml:"allowed_hosts,omitempty"`

	// Bounds limit what connections may hold of this listener: how many,
	// for how long, and how much of a request is buffered.
	Bounds Bounds `yaml:"bounds"`

	// Concurrency are the concurrency limits a client holds slots of with
	// POST /v1/concurrency/acquire, by name. The slots live in the store of
	// the proxy routes' concurrency limits: this process's with memory,
	// leases in Redis shared by every instance with redis or hybrid.
	Concurrency map[string]CheckAPIConcurrency `yaml:"concurrency,omitempty"`
}

// CheckAPIConcurrency is one concurrency limit of the check API.
type CheckAPIConcurrency struct {
	// Limit is the number of slots per key held at once.
	Limit int `yaml:"limit"`

	// Lease is how long a slot is held after an acquire or a renewal,
	// unless the request gives a shorter ttl; a client that stops renewing
	// loses its slot when it runs out. Default 30s.
	Lease Duration `yaml:"lease,omitempty"`
}

// DefaultCheckLease is CheckConcurrency.Lease's default.
const DefaultCheckLease = 30 * time.Second

func (c *CheckAPI) setDefaults() { c.Listen = DefaultCheckListen; c.Bounds.defaults(boundsHTTP) }

// Envoy configures the Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService).
type Envoy struct {
	// Listen is the gRPC address. Default "127.0.0.1:8082".
	Listen string `yaml:"listen"`

	// TLS serves gRPC over TLS (with client_ca, mutual TLS). Envoy's
	// cluster for the service then needs a transport_socket with TLS.
	TLS *ServerTLS `yaml:"tls,omitempty"`

	// Token, when set, is required with every ShouldRateLimit call as the
	// metadata "authorization: Bearer TOKEN" (in Envoy, the grpc_service's
	// initial_metadata). Without one, anyone who reaches the listener can
	// spend and refund every client's budget: keep it on a private network.
	// Use ${ENVOY_TOKEN} or TokenFile to keep it out of the file.
	Token string `yaml:"token,omitempty"`

	// TokenFile is a file holding the token; exclusive with Token.
	TokenFile string `yaml:"token_file,omitempty"`

	// RatelimitConfig are envoyproxy/ratelimit configuration files, loaded
	// as they are (see docs/envoy.md), relative to this file's directory.
	RatelimitConfig []string `yaml:"ratelimit_config"`

	// ResponseHeaders is none (the default, as envoyproxy/ratelimit),
	// draft (X-RateLimit-*) or ietf (RateLimit-Policy, RateLimit).
	ResponseHeaders envoyrules.HeaderStyle `yaml:"response_headers"`

	// Algorithm applies to every imported limit that names none. Default
	// fixed_window, which is what envoyproxy/ratelimit does.
	Algorithm string `yaml:"algorithm"`

	// ShadowMode answers OK to everything while still counting, for every
	// descriptor (envoyproxy/ratelimit's global shadow mode): each
	// descriptor's status still says whether it was over its limit.
	ShadowMode bool `yaml:"shadow_mode,omitempty"`

	// Descriptors is all_or_nothing (the default: when one descriptor of a
	// request is over its limit, none is charged) or independent (each
	// descriptor is decided and charged on its own, as envoyproxy/ratelimit
	// does).
	Descriptors string `yaml:"descriptors"`

	// ChargeDenied charges a descriptor that is over its limit too, as
	// envoyproxy/ratelimit counts (it adds the hits, then compares). The
	// default charges only what is admitted, so a client that retries while
	// limited does not extend its own penalty. With independent and
	// charge_denied floodgate counts as envoyproxy/ratelimit does; with
	// all_or_nothing and charge_denied as its
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	ChargeDenied bool `yaml:"charge_denied,omitempty"`

	// MergeDomains lets several ratelimit_config files hold one domain
	// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a descriptor given in
	// two of them is an error.
	MergeDomains bool `yaml:"merge_domains,omitempty"`

	// DynamicMetadata sends the request's descriptors and the metadata of
	// the rules that passed in each answer's dynamic_metadata
	// (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool `yaml:"dynamic_metadata,omitempty"`

	// EngineErrors is failure_mode (the default: an outage of the storage
	// is answered by storage.failure, e.g. OK under fail_open) or status
	// (a gRPC UNAVAILABLE error, as envoyproxy/ratelimit answers when Redis
	// fails, so that Envoy's failure_mode_deny decides).
	EngineErrors string `yaml:"engine_errors"`

	// Bounds limit what connections may hold of this listener: how many,
	// for how long, and how much of a request is buffered.
	Bounds Bounds `yaml:"bounds"`

	// Leasing leases every rule of the ratelimit_config files (lease:
	// auto, lease_max), which stay as envoyproxy/ratelimit reads them.
	// A descriptor that carries its own limit is decided exactly.
	Leasing `yaml:",inline"`

	// Rules are the loaded RatelimitConfig files.
	Rules *envoyrules.Rules `yaml:"-"`
}

func (e *Envoy) setDefaults() {
	e.Listen = DefaultEnvoyListen
	e.ResponseHeaders = envoyrules.HeadersNone
	e.Algorithm = defaultEnvoyAlgorithm
	e.Descriptors = enumEnvoyDescriptors[0]
	e.EngineErrors = enumEnvoyErrors[0]
	e.Bounds.defaults(boundsGRPC)
}

// Postgres configures the rate-limiting PostgreSQL proxy, which limits
// queries globally, per user and per client IP, in that order.
type Postgres struct {
	// Listen is the address clients connect to. Default "127.0.0.1:6432".
	Listen string `yaml:"listen"`

	// Upstream is the PostgreSQL server (or pgbouncer), host:port.
	Upstream string `yaml:"upstream"`

	// TLS offers TLS to clients. Absent: clients that ask for it are told
	// no (and may continue in plain text or disconnect).
	TLS *ServerTLS `yaml:"tls,omitempty"`

	// UpstreamTLS speaks TLS to the upstream server. Absent: plain TCP.
	UpstreamTLS *ClientTLS `yaml:"upstream_tls,omitempty"`

	// RateLimit are the query limits.
	RateLimit PostgresRateLimit `yaml:"rate_limit"`

	// Connections limits new connections per database user and per client
	// address; a connection over its limit is refused with FATAL 53300
	// before authentication.
	Connections PostgresConnections `yaml:"connections"`

	// Concurrency bounds the queries of each database user in flight at
	// once, beside the rate limits. Absent: no bound.
	Concurrency *PostgresConcurrency `yaml:"concurrency,omitempty"`

	// ProxyProtocolFrom lists the load balancers (CIDRs or addresses)
	// trusted to send a PROXY protocol header (v1 or v2) naming the real
	// client. From any other peer no header is read.
	ProxyProtocolFrom []string `yaml:"proxy_protocol_from,omitempty"`

	// ChargeEmptyQuery charges queries that hold only whitespace,
	// semicolons and comments, the pings of connection pools. Default
	// false: they pass uncharged.
	ChargeEmptyQuery bool `yaml:"charge_empty_query"`

	// Replication is what happens to replication connections: charge (the
	// default: their queries are charged like any other), exempt, or
	// refuse.
	Replication pgmode.ReplicationMode `yaml:"replication,omitempty"`

	// Bounds limit what connections may hold of this listener: how many,
	// for how long, and how much of a request is buffered.
	Bounds Bounds `yaml:"bounds"`
}

func (p *Postgres) setDefaults() {
	p.Listen = DefaultPostgresListen
	p.Bounds.defaults(boundsPostgres)
	// header_timeout is the proxy's startup bound: the library's default,
	// one constant for serve and Go programs alike.
	p.Bounds.HeaderTimeout = Duration(pgmode.DefaultStartupTimeout)
}

// PostgresConcurrency bounds the queries of each database user in flight
// at once (pgproxy.Limits.ConcurrentQueries): a query is in flight from the
// client's Query or Sync until the server's ReadyForQuery. With storage
// memory the slots are this process's; with redis or hybrid they are
// leases in Redis shared by every instance, like a route's concurrency.
type PostgresConcurrency struct {
	// PerUser is the number of queries of one user in flight at once.
	PerUser int `yaml:"per_user"`

	// MaxWait is the longest a query that finds its user's slots taken
	// waits for one, in arrival order, before it is refused with ERROR
	// 53300. Default 0: refused at once.
	MaxWait Duration `yaml:"max_wait,omitempty"`

	// Queue is the most queries of one user that may wait at once; a query
	// beyond it is refused at once. Used only with max_wait. Default
	// 1024 (DefaultPostgresConcurrencyQueue).
	Queue int `yaml:"queue,omitempty"`
}

// DefaultPostgresConcurrencyQueue is postgres.concurrency.queue when
// max_wait is set and queue is not: every waiting query is a client
// connection, which the listener's connection bounds already limit.
const DefaultPostgresConcurrencyQueue = 1024

// PostgresConnections are the PostgreSQL proxy's limits on new
// connections. Their policies are named "postgres.connections.per_user"
// and "postgres.connections.per_ip".
type PostgresConnections struct {
	// PerUser limits new connections of each database user.
	PerUser *LimitsSpec `yaml:"per_user,omitempty"`

	// PerIP limits new connections from each client address.
	PerIP *LimitsSpec `yaml:"per_ip,omitempty"`
}

// PostgresRateLimit are the PostgreSQL proxy's limits, checked global →
// per user → per IP; the first denial wins and refunds the others.
type PostgresRateLimit struct {
	// Global limits all queries through this proxy together.
	Global *PostgresLimit `yaml:"global,omitempty"`

	// PerUser limits each database user (the startup message's user).
	PerUser *PostgresLimit `yaml:"per_user,omitempty"`

	// PerIP limits each client address.
	PerIP *PostgresLimit `yaml:"per_ip,omitempty"`
}

// A PostgresLimit is one level of PostgresRateLimit. Its policy is named
// "postgres.global", "postgres.per_user" or "postgres.per_ip".
type PostgresLimit struct {
	LimitsSpec `yaml:",inline"`

	// MaxWait lets a limited query wait up to this long for its turn
	// instead of failing at once. Default 0: fail at once with SQLSTATE
	// 53400.
	MaxWait Duration `yaml:"max_wait,omitempty"`

	// Penalty refuses every query of a user (per_user), a client address
	// (per_ip) or of everyone (global) for this long once the level
	// denies one, as a policy's penalty does; a query refused so does not
	// wait (max_wait waits out only penalties shorter than it). Between 1s
	// and 90 days; absent means no penalty.
	Penalty Duration `yaml:"penalty,omitempty"`

	// Overrides replace the limits for exact users (per_user) or client
	// addresses (per_ip).
	Overrides map[string]LimitsSpec `yaml:"overrides,omitempty"`

	// Leasing answers most of the level's decisions from blocks leased
	// from Redis (lease: auto).
	Leasing `yaml:",inline"`
}

// Admin configures the operators' listener.
type Admin struct {
	// Listen is the address. Default "127.0.0.1:9090"; an empty string
	// turns the admin listener off.
	Listen string `yaml:"listen"`

	// Pprof serves net/http/pprof under /debug/pprof/. Default false.
	Pprof bool `yaml:"pprof,omitempty"`

	// Token, when set, is required as "Authorization: Bearer TOKEN" for
	// everything but /metrics, /healthz and /readyz (which monitoring
	// scrapes) and the status page's shell (which holds no data): the
	// configuration, the status data, key inspection and reset, pprof.
	// Off loopback a token is required: without one the file is refused.
	Token string `yaml:"token,omitempty"`

	// TokenFile is a file holding the token; exclusive with Token.
	TokenFile string `yaml:"token_file,omitempty"`

	// RawKeys shows keys (client addresses, user ids) unredacted on the
	// status page and in logs. Default false: keys are redacted.
	RawKeys bool `yaml:"raw_keys,omitempty"`

	// AllowedHosts are the names, besides IP addresses and localhost,
	// requests may give as their Host (the name Prometheus or an operator's
	// browser uses); others are refused but for /metrics, /healthz and
	// /readyz, so that a web page whose name an attacker points at this
	// listener (DNS rebinding) cannot read or reset anything.
	AllowedHosts []string `yaml:"allowed_hosts,omitempty"`

	// Bounds limit what connections may hold of this listener: how many,
	// for how long, and how much of a request is buffered.
	Bounds Bounds `yaml:"bounds"`
}

func (a *Admin) setDefaults() { a.Listen = DefaultAdminListen; a.Bounds.defaults(boundsHTTP) }

// Telemetry configures the OTLP export of metrics and traces
// (docs/telemetry.md). What the section leaves out, the standard
// OTEL_EXPORTER_OTLP_* environment variables give (endpoint, headers,
// certificate, timeout), then the exporters' defaults; a field set here
// wins over its variable.
type Telemetry struct {
	// Endpoint is where the OTLP receiver listens: host:port, or a URL
	// (http:// for a receiver without TLS). Default: the variable
	// OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317 (grpc) or
	// localhost:4318 (http).
	Endpoint string `yaml:"endpoint,omitempty"`

	// Protocol is grpc (the default) or http (OTLP over HTTP with
	// protobuf bodies, to /v1/metrics and /v1/traces under Endpoint).
	Protocol string `yaml:"protocol"`

	// Insecure sends without TLS. Default false: TLS, verified against
	// the system's roots or CAFile.
	Insecure bool `yaml:"insecure,omitempty"`

	// CAFile is a PEM file of the certificate authorities that sign the
	// receiver's certificate, instead of the system's.
	CAFile string `yaml:"ca_file,omitempty"`

	// Headers are sent with every export, e.g. an authorization header:
	// write ${OTLP_TOKEN} to take a value from the environment, or use
	// HeaderFiles.
	Headers map[string]string `yaml:"headers,omitempty"`

	// HeaderFiles are headers whose values are files' contents (trailing
	// newline removed), by header name; a name may not be in both.
	HeaderFiles map[string]string `yaml:"header_files,omitempty"`

	// ServiceName is the resource's service.name. Default "floodgate"
	// (the variable OTEL_SERVICE_NAME when set).
	ServiceName string `yaml:"service_name"`

	// ResourceAttributes are added to the resource of every metric and
	// span (e.g. deployment.environment.name: prod), over those of
	// OTEL_RESOURCE_ATTRIBUTES.
	ResourceAttributes map[string]string `yaml:"resource_attributes,omitempty"`

	// Signals are what is exported: metrics, traces or both (the
	// default).
	Signals []string `yaml:"signals"`

	// MetricsInterval is how often the metrics are read and exported.
	// Default 60s.
	MetricsInterval Duration `yaml:"metrics_interval"`

	// SamplingRatio is the share of traces started here that are
	// recorded, from 0 to 1 (the default). A request that arrives in a
	// trace follows its parent's sampling decision instead.
	SamplingRatio float64 `yaml:"sampling_ratio"`
}

// Telemetry's protocols and signals.
const (
	TelemetryGRPC    = "grpc"
	TelemetryHTTP    = "http"
	TelemetryMetrics = "metrics"
	TelemetryTraces  = "traces"
)

func (t *Telemetry) setDefaults() {
	t.Protocol, t.ServiceName = TelemetryGRPC, "floodgate"
	t.Signals = []string{TelemetryMetrics, TelemetryTraces}
	t.MetricsInterval = Duration(60 * time.Second)
	t.SamplingRatio = 1
}

// Log configures the daemon's logs.
type Log struct {
	// Format is text (the default) or json.
	Format string `yaml:"format"`

	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
}

func (l *Log) setDefaults() { l.Format, l.Level = "text", "info" }

// Bounds limit what clients may hold of one listener, so that no client,
// by opening connections and sending nothing, or a little at a time, or
// headers without end, can take the daemon's memory and file descriptors.
// Every field must be positive; each has a default meant for a daemon in
// front of the internet. What applies where: the HTTP listeners (proxy,
// check, admin) apply every field; the Envoy listener (gRPC) all but
// body_timeout (its request messages have a bound of their own, 4 MiB,
// so that every request Envoy sends is decided: see docs/envoy.md); the
// PostgreSQL listener max_connections, max_connections_per_client and
// header_timeout (its startup), its messages being bounded by
// PostgreSQL's own limits. Setting a field a listener does not apply is an
// error.
type Bounds struct {
	// MaxConnections bounds the connections open at once on this listener;
	// more are accepted and closed at once. Default 4096.
	MaxConnections int `yaml:"max_connections,omitempty"`

	// MaxConnectionsPerClient bounds the connections open at once from one
	// client address (an IPv4 address or an IPv6 /64), counted at the
	// peer: behind a load balancer that is the balancer, so the peers
	// listed in proxy.client_ip.trusted_proxies (the proxy) and
	// postgres.proxy_protocol_from (the PostgreSQL proxy) are exempt.
	// Default 256.
	MaxConnectionsPerClient int `yaml:"max_connections_per_client,omitempty"`

	// MaxHeaderBytes bounds a request's header: the header list of HTTP/2
	// and gRPC, counted as HTTP/2 counts it (each field's name and value
	// and 32 bytes), and the request line and header fields of HTTP/1,
	// which Go's HTTP server reads up to this plus 4096 bytes of
	// read-ahead (36864 by default). A larger header is answered 431 (on
	// the Envoy listener, the call fails RESOURCE_EXHAUSTED) and its
	// connection closed. Not a gRPC request message, whatever its size.
	// Default 32768 (32 KiB, nginx's 4 × 8 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes,omitempty"`

	// HeaderTimeout bounds receiving a request's header from the
	// connection's first byte or the previous request (and the TLS
	// handshake); on the Envoy listener the connection's setup, on the
	// PostgreSQL listener a client's startup (pgproxy.Config.StartupTimeout,
	// whose default, pgproxy.DefaultStartupTimeout, is also 10s). Default
	// 10s.
	HeaderTimeout Duration `yaml:"header_timeout,omitempty"`

	// BodyTimeout bounds receiving a request's body, from the end of its
	// header: a client that sends its body slowly holds an upstream
	// connection for this long at most, then its request fails (the proxy
	// answers 408, the client's fault, not the upstream's). Raise it for
	// slow uploads. Default 1m.
	BodyTimeout Duration `yaml:"body_timeout,omitempty"`

	// IdleTimeout closes a kept-alive connection (or a gRPC connection
	// without calls) after this long without a request, and on the proxy
	// a WebSocket (any upgraded connection) after this long without a byte
	// either way. Default 2m.
	IdleTimeout Duration `yaml:"idle_timeout,omitempty"`

	// MaxConcurrentStreams bounds the requests in flight at once on one
	// HTTP/2 or gRPC connection. Default 100.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams,omitempty"`
}

// setDefaults sets the defaults of an HTTP listener, which applies every
// field (and which docs/config.md shows).
func (b *Bounds) setDefaults() { b.defaults(boundsHTTP) }

// defaults sets the defaults of the fields in applies (YAML names),
// leaving the others zero, which the file then omits.
func (b *Bounds) defaults(applies []string) {
	for _, f := range applies {
		switch f {
		case "max_connections":
			b.MaxConnections = DefaultMaxConnections
		case "max_connections_per_client":
			b.MaxConnectionsPerClient = DefaultMaxConnectionsPerClient
		case "max_header_bytes":
			b.MaxHeaderBytes = DefaultMaxHeaderBytes
		case "header_timeout":
			b.HeaderTimeout = Duration(DefaultHeaderTimeout)
		case "body_timeout":
			b.BodyTimeout = Duration(DefaultBodyTimeout)
		case "idle_timeout":
			b.IdleTimeout = Duration(DefaultIdleTimeout)
		case "max_concurrent_streams":
			b.MaxConcurrentStreams = DefaultMaxConcurrentStreams
		}
	}
}
