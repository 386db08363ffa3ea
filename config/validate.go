package config

import (
	"github.com/floodgate-go/floodgate/tokencost"

	"errors"

	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"

	"github.com/floodgate-go/floodgate/internal/textform"
	"github.com/floodgate-go/floodgate/internal/yamlpos"

	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// A checker validates a decoded Config and completes it (resolved file
// names, secrets read from files, derived route names, loaded Envoy
// rules), reporting every problem at its field's position.
type checker struct {
	c     *Config
	d     *yamlpos.Decoder
	dir   string
	files map[string][]byte
}

func (k *checker) errf(path, format string, args ...any) {
	k.d.Errs = append(k.d.Errs, &Error{Pos: yamlpos.LookupPos(k.d.Pos, k.d.File(), path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (k *checker) wrapf(path string, err error, format string, args ...any) {
	k.d.Errs = append(k.d.Errs, &Error{Pos: yamlpos.LookupPos(k.d.Pos, k.d.File(), path), Path: path, Msg: fmt.Sprintf(format, args...), Err: err})
}

// has reports whether the file sets the field at path.
func (k *checker) has(path string) bool { _, ok := k.d.Pos[path]; return ok }

// oneOf checks an enumerated value, suggesting the nearest valid one.
func (k *checker) oneOf(path, value string, valid ...string) bool {
	return k.d.OneOf(path, value, valid...)
}

// resolve makes a relative file name relative to the configuration's
// directory, which is where an operator expects it to be looked up
// whatever directory the daemon was started in.
func (k *checker) resolve(p *string) {
	if *p != "" && !filepath.IsAbs(*p) {
		*p = filepath.Join(k.dir, *p)
	}
}

func (k *checker) check() {
	c := k.c
	k.checkStorage()
	k.checkPolicies()
	if c.Proxy != nil {
		k.checkProxy()
	}
	if c.Check != nil {
		if len(c.Policies) == 0 {
			k.errf("check", "the check API decides with the policies under policies, and there are none")
		}
		k.listen("check.listen", c.Check.Listen, false)
		k.bounds("check", &c.Check.Bounds, boundsHTTP)
		k.secret("check", &c.Check.Token, &c.Check.TokenFile)
		for _, name := range slices.Sorted(maps.Keys(c.Check.Concurrency)) {
			cc, path := c.Check.Concurrency[name], "check.concurrency."+name
			if name == "" {
				k.errf("check.concurrency", "a limit needs a name, the one clients give as \"name\"")
			}
			if cc.Limit <= 0 {
				k.errf(path+".limit", "give a positive limit (slots per key held at once)")
			}
			if cc.Lease < 0 {
				k.errf(path+".lease", "must not be negative; leave it out for the default 30s")
			}
		}
		if c.Check.Token == "" && c.Check.Listen != "" && !pathnet.Loopback(c.Check.Listen) {
			k.errf("check.listen", "%s is reachable off loopback, so the check API needs check.token (or check.token_file): anyone there could spend every client's budget; or listen on 127.0.0.1", c.Check.Listen)
		}
	}
	if c.Envoy != nil {
		k.checkEnvoy()
	}
	if c.Telemetry != nil {
		k.checkTelemetry()
	}
	if c.Postgres != nil {
		k.checkPostgres()
	}
	if c.Admin != nil {
		k.checkAdmin()
	}
	k.oneOf("log.format", c.Log.Format, enumLogFormats...)
	k.oneOf("log.level", c.Log.Level, enumLogLevels...)
	if c.ShutdownTimeout <= 0 {
		k.errf("shutdown_timeout", "must be positive")
	}
	if c.ShutdownDelay < 0 {
		k.errf("shutdown_delay", "must not be negative")
	}
	if c.Proxy == nil && c.Check == nil && c.Envoy == nil && c.Postgres == nil {
		k.errf("", "nothing to serve: configure at least one of proxy, check, envoy or postgres")
	}
	k.checkListenConflicts()
}

func (k *checker) checkStorage() {
	s := &k.c.Storage
	if !k.oneOf("storage.engine", string(s.Engine), enumEngines...) {
		return
	}
	if s.Memory.MaxKeys == 0 || s.Memory.MaxKeys < -1 {
		k.errf("storage.memory.max_keys", "must be positive, or -1 for no bound")
	}
	switch {
	case s.Remote() && s.Redis == nil:
		k.errf("storage", "the %s engine needs storage.redis (at least its addrs)", s.Engine)
	case !s.Remote() && s.Redis != nil:
		k.errf("storage.redis", "is set but storage.engine is %s, so it would be ignored; set engine: redis (or hybrid), or remove it", s.Engine)
	}
	switch {
	case s.Engine == EngineHybrid && s.Hybrid == nil:
		if what := k.withoutLocal(); what != "" {
			k.errf("storage", "the hybrid engine needs storage.hybrid (local_fraction, or instances) for %s; or give every policy local limits", what)
		}
	case s.Engine != EngineHybrid && s.Hybrid != nil:
		k.errf("storage.hybrid", "is set but storage.engine is %s; set engine: hybrid, or remove it", s.Engine)
	}
	if s.Redis != nil {
		k.checkRedis(s.Redis)
	}
	if s.Hybrid != nil {
		h := s.Hybrid
		switch {
		case k.has("storage.hybrid.local_fraction") && k.has("storage.hybrid.instances"):
			k.errf("storage.hybrid", "set local_fraction or instances, not both")
		case k.has("storage.hybrid.local_fraction"):
			if !(h.LocalFraction > 0 && h.LocalFraction <= 1) {
				k.errf("storage.hybrid.local_fraction", "%g is outside (0, 1]; about 2/N suits N instances", h.LocalFraction)
			}
			if k.has("storage.hybrid.headroom") {
				k.errf("storage.hybrid.headroom", "applies with instances only; local_fraction already includes it")
			}
		case k.has("storage.hybrid.instances"):
			if h.Instances < 1 {
				k.errf("storage.hybrid.instances", "must be at least 1 (the fewest replicas you run)")
			}
			if k.has("storage.hybrid.headroom") && h.Headroom < 1 {
				k.errf("storage.hybrid.headroom", "%g is below 1, so the global limit could never be reached; use 1.2 to 2", h.Headroom)
			}
		default:
			k.errf("storage.hybrid", "set local_fraction (e.g. 0.4) or instances (e.g. 3)")
		}
	}
	f := &s.Failure
	switch s.Engine {
	case EngineRedis:
		// A mode written with no value (mode:) is as missing as no mode.
		if !k.has("storage.failure.mode") || f.Mode == 0 {
			k.errf("storage.failure", "storage.failure.mode is required with the redis engine: fail_open (allow when Redis is down), fail_closed (answer 503) or local_fallback (limit per instance)")
		}
	case EngineHybrid:
		if !k.has("storage.failure.mode") || f.Mode == 0 {
			f.Mode = failover.LocalFallback
		} else if f.Mode != failover.LocalFallback {
			k.errf("storage.failure.mode", "the hybrid engine always falls back on its local filter; remove mode or set local_fallback")
		}
	}
	if f.Timeout <= 0 {
		k.errf("storage.failure.timeout", "must be positive (the default is %s)", DefaultFailureTimeout)
	}
	if !k.has("storage.failure.slow_timeout") {
		// A timeout raised above the default slow timeout raises it too.
		f.SlowTimeout = max(f.SlowTimeout, f.Timeout)
	} else if f.SlowTimeout < f.Timeout {
		k.errf("storage.failure.slow_timeout", "%s is shorter than timeout %s; a call is cut off at slow_timeout, so it must be at least timeout (the default is %s)", f.SlowTimeout.D(), f.Timeout.D(), DefaultSlowTimeout)
	}
	b := &f.Breaker
	if !(b.FailureRate > 0 && b.FailureRate <= 1) {
		k.errf("storage.failure.breaker.failure_rate", "%g is not a share of calls above 0 and at most 1 (the default is %g)", b.FailureRate, DefaultFailureRate)
	}
	if b.MinCalls == 0 || b.MinCalls < -1 {
		k.errf("storage.failure.breaker.min_calls", "must be positive, or -1 to disable the breaker (the default is %d)", DefaultBreakerMinCalls)
	}
	if b.Window <= 0 {
		k.errf("storage.failure.breaker.window", "must be positive (the default is %s)", DefaultBreakerWindow)
	}
	if b.Backoff <= 0 {
		k.errf("storage.failure.breaker.backoff", "must be positive")
	}
	if b.MaxBackoff < b.Backoff {
		k.errf("storage.failure.breaker.max_backoff", "%s is shorter than backoff %s", b.MaxBackoff.D(), b.Backoff.D())
	}
}

func (k *checker) checkRedis(r *Redis) {
	const p = "storage.redis"
	if !k.oneOf(p+".mode", string(r.Mode), enumRedisModes...) {
		return
	}
	if len(r.Addrs) == 0 {
		k.errf(p+".addrs", "give at least one host:port")
	}
	for i, a := range r.Addrs {
		k.hostPort(fmt.Sprintf("%s.addrs[%d]", p, i), a)
	}
	switch r.Mode {
	case RedisStandalone:
		if len(r.Addrs) > 1 {
			k.errf(p+".addrs", "standalone mode takes one address; for several nodes use mode: sentinel or cluster")
		}
	case RedisSentinel:
		if r.MasterName == "" {
			k.errf(p, "sentinel mode needs master_name (the name the Sentinels monitor)")
		}
	case RedisCluster:
		if r.DB != 0 {
			k.errf(p+".db", "Redis Cluster has database 0 only")
		}
	}
	if r.Mode != RedisSentinel {
		for _, f := range []string{"master_name", "sentinel_username", "sentinel_password"} {
			if k.has(p + "." + f) {
				k.errf(p+"."+f, "applies to sentinel mode only")
			}
		}
	}
	if r.DB < 0 {
		k.errf(p+".db", "must not be negative")
	}
	if r.PoolSize < 0 {
		k.errf(p+".pool_size", "must not be negative (0 means the client's default)")
	}
	for f, d := range map[string]Duration{"dial_timeout": r.DialTimeout, "read_timeout": r.ReadTimeout, "write_timeout": r.WriteTimeout} {
		if d <= 0 {
			k.errf(p+"."+f, "must be positive")
		}
	}
	if strings.ContainsAny(r.KeyPrefix, "{}") {
		k.errf(p+".key_prefix", "%q contains { or }, which would break the hash tags that keep a policy's keys in one Cluster slot", r.KeyPrefix)
	}
	k.secretPair(p, "password", &r.Password, &r.PasswordFile)
	k.clientTLS(p+".tls", r.TLS)
}

// clientTLS checks the TLS settings of a connection floodgate makes.
func (k *checker) clientTLS(path string, t *ClientTLS) {
	if t == nil {
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		k.errf(path, "set both cert and key, or neither")
	}
	k.resolve(&t.CA)
	k.resolve(&t.Cert)
	k.resolve(&t.Key)
}

// secret checks a token / token_file pair under path.
func (k *checker) secret(path string, value, file *string) {
	k.secretPair(path, "token", value, file)
}

// secretPair checks that at most one of NAME and NAME_file is set, and
// reads the file into *value.
func (k *checker) secretPair(path, name string, value, file *string) {
	if *file == "" {
		return
	}
	fp := path + "." + name + "_file"
	if *value != "" {
		k.errf(fp, "set %s or %s_file, not both", name, name)
		return
	}
	k.resolve(file)
	s, raw, err := readSecret(*file)
	if err != nil {
		k.wrapf(fp, err, "%v", err)
		return
	}
	k.files[*file] = raw
	*value = s
}

// withoutLocal names limits the hybrid engine's filter must scale by
// storage.hybrid's share, "" when every policy gives its own local limits.
func (k *checker) withoutLocal() string {
	for _, name := range k.sortedByPos("policies", keysOf(k.c.Policies)) {
		p := k.c.Policies[name]
		switch {
		case p.Local == nil:
			return "policy " + name + ", which gives no local limits"
		case len(p.Overrides) > 0 || len(p.Tiers) > 0:
			return "the overrides and tiers of policy " + name
		}
	}
	if k.c.Postgres != nil {
		return "the postgres policies"
	}
	if k.c.Envoy != nil {
		return "the envoy rules"
	}
	return ""
}

var policyName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

func (k *checker) checkPolicies() {
	for _, name := range k.sortedByPos("policies", keysOf(k.c.Policies)) {
		path := yamlpos.MapKeyPath("policies", name)
		if !policyName.MatchString(name) {
			k.errf(path, "policy name %q: use lower-case letters, digits, _ and -, starting with a letter or digit", name)
		}
		p := k.c.Policies[name]
		k.buildPolicy(path, name, &p.LimitsSpec, p.Local, p.Overrides, p.Tiers)
		k.checkLease(path, &p.Leasing)
		k.checkPenalty(path, p.Penalty)
	}
}

// checkPenalty checks the penalty of the policy at path: absent, or within
// the library's bounds. A penalty of 0 is refused, not read as "none": it
// is a mistake for one that was meant.
func (k *checker) checkPenalty(path string, d Duration) {
	if !k.has(path + ".penalty") {
		return
	}
	if d == 0 {
		k.errf(path+".penalty", "a penalty of 0 blocks nothing; give a duration such as 15m, or remove penalty for none")
		return
	}
	if err := floodgate.ValidatePenalty(d.D()); err != nil {
		k.errf(path+".penalty", "%s", strings.TrimPrefix(err.Error(), floodgate.ErrInvalidPolicy.Error()+": "))
	}
}

// checkLease checks a lease and lease_max at path.
func (k *checker) checkLease(path string, p *Leasing) {
	if p.Lease != "" && k.oneOf(path+".lease", p.Lease, enumLease...) && p.Leased() && !k.c.Storage.Remote() {
		k.errf(path+".lease", "leases are taken from Redis, and storage.engine is %s; set engine: redis or hybrid, or lease: off", k.c.Storage.Engine)
	}
	if k.has(path + ".lease_max") {
		switch {
		case !p.Leased():
			k.errf(path+".lease_max", "applies with lease: auto only")
		case p.LeaseMax < 1:
			k.errf(path+".lease_max", "must be at least 1 unit; %d would lease nothing", p.LeaseMax)
		}
	}
}

// buildPolicy checks a policy's limits, overrides and tiers and returns
// the library value.
func (k *checker) buildPolicy(path, name string, base, local *LimitsSpec, overrides, tiers map[string]LimitsSpec) floodgate.Policy {
	fp := floodgate.Policy{Name: name}
	fp.Limits = k.limits(path, base, LimitSpec{})
	if local != nil {
		if k.c.Storage.Engine != EngineHybrid {
			k.errf(path+".local", "only the hybrid engine has a local filter, and storage.engine is %s; set engine: hybrid, or remove local", k.c.Storage.Engine)
		}
		// The library checks that each is a share of its limit.
		fp.Local = k.limits(path+".local", local, LimitSpec{})
	}
	var inherit LimitSpec // what overrides and tiers take from a one-limit policy
	if list := base.List(); len(list) == 1 {
		inherit = LimitSpec{Algorithm: list[0].Algorithm, Align: list[0].Align}
	}
	for _, key := range k.sortedByPos(path+".overrides", keysOf(overrides)) {
		if key == "" {
			k.errf(yamlpos.MapKeyPath(path+".overrides", key), "an override needs a key")
		}
		s := overrides[key]
		if fp.Overrides == nil {
			fp.Overrides = map[string][]floodgate.Limit{}
		}
		fp.Overrides[key] = k.limits(yamlpos.MapKeyPath(path+".overrides", key), &s, inherit)
	}
	for _, tier := range k.sortedByPos(path+".tiers", keysOf(tiers)) {
		if tier == "" {
			k.errf(yamlpos.MapKeyPath(path+".tiers", tier), "a tier needs a name")
		}
		s := tiers[tier]
		if fp.Tiers == nil {
			fp.Tiers = map[string][]floodgate.Limit{}
		}
		fp.Tiers[tier] = k.limits(yamlpos.MapKeyPath(path+".tiers", tier), &s, inherit)
	}
	return fp
}

// limits checks one limit set and builds its floodgate limits. inherit is
// the algorithm and alignment of the policy's single limit, taken by
// overrides and tiers that give neither.
func (k *checker) limits(path string, s *LimitsSpec, inherit LimitSpec) []floodgate.Limit {
	short := !s.Rate.IsZero()
	for _, f := range []string{"burst", "algorithm", "align"} {
		if !short && k.has(path+"."+f) {
			if len(s.Limits) > 0 {
				k.errf(path+"."+f, "%s goes with rate; with a limits list, put it on each limit", f)
			} else {
				k.errf(path+"."+f, "%s without a rate; add rate (e.g. rate: 100/min)", f)
			}
		}
	}
	switch {
	case short && len(s.Limits) > 0:
		k.errf(path+".limits", "give rate (one limit) or limits (several), not both")
		return nil
	case !short && len(s.Limits) == 0:
		if !k.has(path + ".burst") {
			k.errf(path, "no limit: add rate (e.g. rate: 100/min) or a limits list")
		}
		return nil
	case len(s.Limits) > floodgate.MaxLimits:
		k.errf(path+".limits", "%d limits, more than the %d one decision checks", len(s.Limits), floodgate.MaxLimits)
		return nil
	}
	var out []floodgate.Limit
	if short {
		if l, ok := k.limit(path, s.LimitSpec, inherit); ok {
			out = append(out, l)
		}
		return out
	}
	for i, ls := range s.Limits {
		lp := fmt.Sprintf("%s.limits[%d]", path, i)
		if ls.Rate.IsZero() {
			k.errf(lp, "a limit needs a rate (e.g. rate: 100/min)")
			continue
		}
		if l, ok := k.limit(lp, ls, inherit); ok {
			out = append(out, l)
		}
	}
	return out
}

// limit builds one floodgate.Limit and validates it with the library, so
// that the file is held to exactly the rules the engines enforce.
func (k *checker) limit(path string, s LimitSpec, inherit LimitSpec) (floodgate.Limit, bool) {
	l := floodgate.Limit{Rate: s.Rate.Count, Period: s.Rate.Period, Burst: s.Burst}
	if s.Algorithm == "" && s.Align == "" {
		s.Algorithm, s.Align = inherit.Algorithm, inherit.Align
	}
	alg := s.Algorithm
	if alg != "" {
		a, ok := textform.Algorithm(alg)
		if !ok {
			k.oneOf(path+".algorithm", alg, enumAlgorithms...)
			return l, false
		}
		l.Algorithm = floodgate.Algorithm(a)
	}
	if s.Burst < 0 {
		k.errf(path+".burst", "must not be negative (0 means burst = rate)")
		return l, false
	}
	if s.Align != "" {
		loc, err := time.LoadLocation(s.Align)
		if err != nil {
			k.wrapf(path+".align", err, "unknown time zone %q; use an IANA name such as UTC, Europe/Berlin or America/New_York", s.Align)
			return l, false
		}
		if s.Algorithm != "" && l.Algorithm != floodgate.FixedWindow {
			k.errf(path+".align", "aligns fixed windows only; remove it or set algorithm: fixed_window")
			return l, false
		}
		l.Algorithm, l.Location = floodgate.FixedWindow, loc
	}
	if err := l.Validate(); err != nil {
		field := ".rate"
		if strings.Contains(err.Error(), "burst") {
			field = ".burst"
		}
		k.wrapf(path+field, err, "%s", strings.TrimPrefix(err.Error(), floodgate.ErrInvalidLimit.Error()+": "))
		return l, false
	}
	return l, true
}

// sortedByPos orders map keys by their position in the file, so that
// errors come out in file order and stay stable.
func (k *checker) sortedByPos(path string, keys []string) []string {
	sort.Slice(keys, func(i, j int) bool {
		a := yamlpos.LookupPos(k.d.Pos, k.d.File(), yamlpos.MapKeyPath(path, keys[i]))
		b := yamlpos.LookupPos(k.d.Pos, k.d.File(), yamlpos.MapKeyPath(path, keys[j]))
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return keys[i] < keys[j]
	})
	return keys
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (k *checker) listen(path, addr string, allowEmpty bool) {
	if addr == "" {
		if !allowEmpty {
			k.errf(path, "give an address to listen on, e.g. 127.0.0.1:8080 or :8080")
		}
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		k.errf(path, "%q is not host:port (write :8080 for every interface)", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		k.errf(path, "port %q is not a number from 0 to 65535", port)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			k.errf(path, "listen on an IP address (or localhost), not %q, so the daemon binds where you expect", host)
		}
	}
}

func (k *checker) hostPort(path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		k.errf(path, "%q is not host:port", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		k.errf(path, "port %q is not a number from 1 to 65535", port)
	}
}

// prefixes checks a list of trusted peers (CIDR prefixes or single
// addresses) with the parser the listeners use, clientip.ParsePrefix.
func (k *checker) prefixes(path string, list []string) {
	for i, s := range list {
		if _, err := clientip.ParsePrefix(s); err != nil {
			k.errf(fmt.Sprintf("%s[%d]", path, i), "%q: %v", s, err)
		}
	}
}

func (k *checker) serverTLS(path string, t *ServerTLS) {
	if t == nil {
		return
	}
	if t.Cert == "" {
		k.errf(path, "tls needs cert (a PEM certificate file)")
	}
	if t.Key == "" {
		k.errf(path, "tls needs key (the certificate's PEM key file)")
	}
	k.resolve(&t.Cert)
	k.resolve(&t.Key)
	k.resolve(&t.ClientCA)
}

func (k *checker) checkProxy() {
	p := k.c.Proxy
	k.listen("proxy.listen", p.Listen, false)
	k.bounds("proxy", &p.Bounds, boundsHTTP)
	switch {
	case p.Upstream == "":
		k.errf("proxy", "proxy.upstream is required: the URL of the service to protect (or demo)")
	case p.Upstream == DemoUpstream:
	default:
		u, err := url.Parse(p.Upstream)
		switch {
		case err != nil:
			k.errf("proxy.upstream", "%q is not a URL", p.Upstream)
		case u.Scheme != "http" && u.Scheme != "https":
			k.errf("proxy.upstream", "%q: use an http:// or https:// URL (or demo)", p.Upstream)
		case u.Host == "":
			k.errf("proxy.upstream", "%q has no host", p.Upstream)
		case u.RawQuery != "" || u.Fragment != "":
			k.errf("proxy.upstream", "%q: an upstream URL takes no query or fragment", p.Upstream)
		}
	}
	k.serverTLS("proxy.tls", p.TLS)
	ci := p.ClientIP
	k.prefixes("proxy.client_ip.trusted_proxies", ci.TrustedProxies)
	if ci.Header != "" && !validHeaderName(ci.Header) {
		k.errf("proxy.client_ip.header", "%q is not a valid header name", ci.Header)
	}
	if ci.TrustedHops < 0 || ci.TrustedHops > clientip.MaxHops {
		k.errf("proxy.client_ip.trusted_hops", "must be from 0 to %d", clientip.MaxHops)
	}
	if ci.IPv4Prefix < 0 || ci.IPv4Prefix > 32 {
		k.errf("proxy.client_ip.ipv4_prefix", "must be from 1 to 32")
	}
	if ci.IPv6Prefix < 0 || ci.IPv6Prefix > 128 {
		k.errf("proxy.client_ip.ipv6_prefix", "must be from 1 to 128")
	}
	if _, err := clientip.New(ci.Config()); err != nil && len(k.d.Errs) == 0 {
		k.wrapf("proxy.client_ip", err, "%s", strings.TrimPrefix(err.Error(), clientip.ErrInvalidConfig.Error()+": "))
	}
	k.prefixes("proxy.user_trusted_from", p.UserTrustedFrom)

	names := map[string]int{}
	catchAll := -1
	for i := range p.Routes {
		r := &p.Routes[i]
		rp := fmt.Sprintf("proxy.routes[%d]", i)
		if catchAll >= 0 {
			k.errf(rp, "never matches: routes[%d] before it matches every request; move it up", catchAll)
		}
		k.checkMatch(rp+".match", r.Match)
		if r.Match.Empty() && catchAll < 0 {
			catchAll = i
		}
		if r.Name == "" {
			r.Name = r.Match.String()
		}
		if j, dup := names[r.Name]; dup {
			if k.has(rp + ".name") {
				k.errf(rp+".name", "%q is also the name of routes[%d]; names must be unique", r.Name, j)
			} else {
				k.errf(rp+".match", "the same match as routes[%d], which is tried first, so this route never matches", j)
			}
		} else {
			names[r.Name] = i
		}
		if len(r.Limits) > httplimit.MaxRules {
			k.errf(rp+".limits", "%d limits, more than the %d one request is checked against; combine limits into a policy (a policy holds several, all or nothing)", len(r.Limits), httplimit.MaxRules)
		}
		seen := map[string]int{}
		for j := range r.Limits {
			k.checkRouteLimit(fmt.Sprintf("%s.limits[%d]", rp, j), &r.Limits[j], seen, j)
		}
		if r.Concurrency != nil {
			k.checkConcurrency(rp+".concurrency", r)
		}
		if r.Tokens != nil {
			k.checkTokens(rp+".tokens", r)
		}
	}
}

// checkTokens checks a route's tokens section by building its source, as
// the daemon does.
func (k *checker) checkTokens(path string, r *Route) {
	if _, err := tokencost.New(*r.Tokens); err != nil {
		for _, e := range unjoin(err) {
			k.errf(path, "%s", strings.TrimPrefix(e.Error(), tokencost.ErrInvalidConfig.Error()+": "))
		}
	}
	for _, l := range r.Limits {
		if l.Cost.Tokens != "" {
			return
		}
	}
	k.errf(path, "no limit of the route has a cost of tokens:input, tokens:output or tokens:total, so nothing reads it")
}

// checkConcurrency checks a route's concurrency section; the bounds of the
// adaptive options are the concurrency packages' own, checked when the
// daemon builds the limit (validate builds it too).
func (k *checker) checkConcurrency(path string, r *Route) {
	c := r.Concurrency
	switch {
	case c.Adaptive == nil && c.Limit <= 0:
		k.errf(path+".limit", "give a positive limit (requests in flight at once), or an adaptive section")
	case c.Adaptive != nil && c.Limit != 0:
		k.errf(path+".limit", "a limit and an adaptive section both set the limit; keep one")
	}
	if c.Queue < 0 {
		k.errf(path+".queue", "must be 0 (no waiting) or more")
	}
	if c.MaxWait < 0 {
		k.errf(path+".max_wait", "must not be negative")
	} else if c.MaxWait > 0 && c.Queue == 0 {
		k.errf(path+".max_wait", "is how long a request waits in the queue, and queue is 0; set a queue")
	}
	if r.Shadow {
		k.errf(path, "a shadow route never refuses, and a concurrency limit holds requests back; drop shadow or the concurrency section")
	}
	for _, part := range c.Key {
		if part.Source == KeyUser && len(k.c.Proxy.UserTrustedFrom) == 0 {
			k.errf(path+".key", "%s is believed only from proxy.user_trusted_from, which is empty, so it would never be used; list the gateway that sets it", part)
		}
	}
	if a := c.Adaptive; a != nil {
		k.oneOf(path+".adaptive.algorithm", a.Algorithm, enumAdaptive...)
		if a.Timeout != 0 && a.Algorithm != AdaptiveAIMD {
			k.errf(path+".adaptive.timeout", "only aimd counts slow responses as drops; gradient measures latency itself")
		}
		if a.Tolerance != 0 && a.Algorithm != AdaptiveGradient {
			k.errf(path+".adaptive.tolerance", "only gradient compares latency with a baseline")
		}
	}
}

// checkMatch compiles a route's match as the proxy will, reporting each
// problem at its field.
func (k *checker) checkMatch(path string, m httpmatch.Match) {
	_, err := m.Compile()
	if err == nil {
		return
	}
	for _, e := range unjoin(err) {
		var me *httpmatch.MatchError
		if !errors.As(e, &me) {
			k.errf(path, "%v", e)
			continue
		}
		fp := path + "." + me.Field
		if me.Index >= 0 {
			fp = fmt.Sprintf("%s[%d]", fp, me.Index)
		}
		k.errf(fp, "%s", me.Msg)
	}
}

// unjoin returns the errors errors.Join joined, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func (k *checker) checkRouteLimit(path string, l *RouteLimit, seen map[string]int, idx int) {
	p := k.c.Proxy
	pol, ok := k.c.Policies[l.Policy]
	switch {
	case l.Policy == "":
		k.errf(path, "a limit needs a policy (one of the names under policies)")
	case !ok:
		names := keysOf(k.c.Policies)
		sort.Strings(names)
		if s := yamlpos.Suggest(l.Policy, names); s != "" {
			k.errf(path+".policy", "no policy %q; did you mean %q?", l.Policy, s)
		} else if len(names) > 0 {
			k.errf(path+".policy", "no policy %q (defined: %s)", l.Policy, strings.Join(names, ", "))
		} else {
			k.errf(path+".policy", "no policy %q; define it under policies", l.Policy)
		}
	}
	if len(l.Key) == 0 {
		k.errf(path+".key", "an empty key list; give at least one source, e.g. ip")
	}
	for _, part := range l.Key {
		if part.Source == KeyUser && len(p.UserTrustedFrom) == 0 {
			k.errf(path+".key", "%s is believed only from proxy.user_trusted_from, which is empty, so it would never be used; list the gateway that sets it", part)
		}
	}
	id := l.Policy + "\x00" + l.Key.String()
	if j, dup := seen[id]; dup {
		k.errf(path, "the same policy and key as limits[%d]: both would count the same bucket; drop one", j)
	} else {
		seen[id] = idx
	}
	if l.Cost.Tokens != "" && l.Count == httplimit.CountFailed {
		k.errf(path+".count", "a token cost with count failed charges only calls that fail; use all or successful")
	}
	if l.Cost.ResponseHeader != "" && l.Count != httplimit.CountAll {
		k.errf(path+".cost", "a cost from the response is charged after the response, so count must be all")
	}
	if l.TierHeader != "" {
		if !validHeaderName(l.TierHeader) {
			k.errf(path+".tier_header", "%q is not a valid header name", l.TierHeader)
		}
		if ok && len(pol.Tiers) == 0 {
			k.errf(path+".tier_header", "policy %q has no tiers to pick from; add tiers to it", l.Policy)
		}
		if len(p.UserTrustedFrom) == 0 {
			k.errf(path+".tier_header", "believed only from proxy.user_trusted_from, which is empty; list the gateway that sets it")
		}
	}
}

func (k *checker) checkEnvoy() {
	e := k.c.Envoy
	k.listen("envoy.listen", e.Listen, false)
	k.serverTLS("envoy.tls", e.TLS)
	k.secret("envoy", &e.Token, &e.TokenFile)
	k.bounds("envoy", &e.Bounds, boundsGRPC)
	k.checkLease("envoy", &e.Leasing)
	a, ok := textform.Algorithm(e.Algorithm)
	if !ok {
		k.oneOf("envoy.algorithm", e.Algorithm, enumAlgorithms...)
		return
	}
	alg := floodgate.Algorithm(a)
	if len(e.RatelimitConfig) == 0 {
		k.errf("envoy", "envoy.ratelimit_config is required: the envoyproxy/ratelimit configuration files to serve")
		return
	}
	files := make([]envoyrules.Source, 0, len(e.RatelimitConfig))
	for i := range e.RatelimitConfig {
		k.resolve(&e.RatelimitConfig[i])
		path := e.RatelimitConfig[i]
		data, rerr := yamlpos.ReadFile(path)
		k.files[path] = data
		if rerr != nil {
			rerr = fmt.Errorf("cannot read %s: %w", path, rerr)
			k.wrapf(fmt.Sprintf("envoy.ratelimit_config[%d]", i), rerr, "%v", rerr)
			continue
		}
		files = append(files, envoyrules.Source{Name: path, Data: data})
	}
	k.oneOf("envoy.descriptors", e.Descriptors, enumEnvoyDescriptors...)
	k.oneOf("envoy.engine_errors", e.EngineErrors, enumEnvoyErrors...)
	rules, errs := envoyrules.CompileWith(files, envoyrules.Options{Algorithm: alg, MergeDomains: e.MergeDomains})
	k.d.Errs = append(k.d.Errs, errs...)
	e.Rules = rules
}

func (k *checker) checkPostgres() {
	p := k.c.Postgres
	k.listen("postgres.listen", p.Listen, false)
	k.bounds("postgres", &p.Bounds, boundsPostgres)
	if p.Upstream == "" {
		k.errf("postgres", "postgres.upstream is required: the PostgreSQL server as host:port")
	} else {
		k.hostPort("postgres.upstream", p.Upstream)
	}
	k.serverTLS("postgres.tls", p.TLS)
	k.clientTLS("postgres.upstream_tls", p.UpstreamTLS)
	for _, lv := range p.RateLimit.levels() {
		if lv.limit == nil {
			continue
		}
		path := "postgres.rate_limit." + lv.field
		k.buildPolicy(path, lv.policy, &lv.limit.LimitsSpec, nil, lv.limit.Overrides, nil)
		k.checkPenalty(path, lv.limit.Penalty)
		if lv.limit.MaxWait < 0 {
			k.errf(path+".max_wait", "must not be negative")
		}
		k.checkLease(path, &lv.limit.Leasing)
	}
	for _, cl := range p.Connections.levels() {
		if cl.limit != nil {
			k.buildPolicy("postgres.connections."+cl.field, cl.policy, cl.limit, nil, nil, nil)
		}
	}
	if c := p.Concurrency; c != nil {
		if c.PerUser <= 0 {
			k.errf("postgres.concurrency.per_user", "give a positive number of queries in flight at once per user")
		}
		if c.MaxWait < 0 {
			k.errf("postgres.concurrency.max_wait", "must not be negative")
		}
		if c.Queue < 0 {
			k.errf("postgres.concurrency.queue", "must be 0 (the default) or more")
		} else if c.Queue > 0 && c.MaxWait == 0 {
			k.errf("postgres.concurrency.queue", "is how many queries may wait, and max_wait is 0 (no waiting); set a max_wait")
		}
	}
	k.prefixes("postgres.proxy_protocol_from", p.ProxyProtocolFrom)
}

type pgConnLevel struct {
	field, policy string
	limit         *LimitsSpec
}

func (c *PostgresConnections) levels() []pgConnLevel {
	return []pgConnLevel{
		{"per_user", PolicyPostgresConnPerUser, c.PerUser},
		{"per_ip", PolicyPostgresConnPerIP, c.PerIP},
	}
}

type pgLevel struct {
	field, policy string
	limit         *PostgresLimit
}

func (r *PostgresRateLimit) levels() []pgLevel {
	return []pgLevel{
		{"global", PolicyPostgresGlobal, r.Global},
		{"per_user", PolicyPostgresPerUser, r.PerUser},
		{"per_ip", PolicyPostgresPerIP, r.PerIP},
	}
}

// The names of the PostgreSQL proxy's policies, one per level, under which
// FloodgatePolicies returns them (and metrics, logs and the status page
// show them).
const (
	PolicyPostgresGlobal      = "postgres.global"
	PolicyPostgresPerUser     = "postgres.per_user"
	PolicyPostgresPerIP       = "postgres.per_ip"
	PolicyPostgresConnPerUser = "postgres.connections.per_user"
	PolicyPostgresConnPerIP   = "postgres.connections.per_ip"
)

func (k *checker) checkAdmin() {
	a := k.c.Admin
	k.listen("admin.listen", a.Listen, true)
	k.bounds("admin", &a.Bounds, boundsHTTP)
	k.secret("admin", &a.Token, &a.TokenFile)
	if a.Token == "" && a.Listen != "" && !pathnet.Loopback(a.Listen) {
		k.errf("admin.listen", "%s is reachable off loopback, so the admin listener needs admin.token (or admin.token_file): anyone there could read the limits, see keys and reset them; or listen on 127.0.0.1", a.Listen)
	}
}

// The fields of Bounds each kind of listener applies.
var (
	boundsHTTP     = []string{"max_connections", "max_connections_per_client", "max_header_bytes", "header_timeout", "body_timeout", "idle_timeout", "max_concurrent_streams"}
	boundsGRPC     = []string{"max_connections", "max_connections_per_client", "max_header_bytes", "header_timeout", "idle_timeout", "max_concurrent_streams"}
	boundsPostgres = []string{"max_connections", "max_connections_per_client", "header_timeout"}
)

// bounds checks the bounds of the listener at section: every field
// positive, and none set that the listener does not apply (a value
// accepted and never read would mislead).
func (k *checker) bounds(section string, b *Bounds, applies []string) {
	path := section + ".bounds"
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_connections", int64(b.MaxConnections)},
		{"max_connections_per_client", int64(b.MaxConnectionsPerClient)},
		{"max_header_bytes", int64(b.MaxHeaderBytes)},
		{"header_timeout", int64(b.HeaderTimeout)},
		{"body_timeout", int64(b.BodyTimeout)},
		{"idle_timeout", int64(b.IdleTimeout)},
		{"max_concurrent_streams", int64(b.MaxConcurrentStreams)},
	} {
		fp := path + "." + f.name
		switch {
		case !slices.Contains(applies, f.name):
			if k.has(fp) {
				k.errf(fp, "the %s listener does not apply %s; remove it (docs/config.md says which bounds each listener applies)", section, f.name)
			}
		case f.v <= 0:
			k.errf(fp, "must be positive; a bound cannot be turned off, only raised")
		}
	}
	switch {
	case b.MaxConnectionsPerClient > b.MaxConnections:
		k.errf(path+".max_connections_per_client", "%d is more than max_connections %d, which then bounds every client anyway", b.MaxConnectionsPerClient, b.MaxConnections)
	case b.MaxHeaderBytes > 0 && b.MaxHeaderBytes < 1024:
		k.errf(path+".max_header_bytes", "%d bytes is too few for an ordinary request's header; give at least 1024 (the default is 32768)", b.MaxHeaderBytes)
	case b.MaxConcurrentStreams > 1<<20:
		k.errf(path+".max_concurrent_streams", "%d is beyond any client's need; keep it at a few hundred at most", b.MaxConcurrentStreams)
	}
}

// checkListenConflicts reports two listeners on one address, which would
// fail at start with a less helpful "address already in use".
func (k *checker) checkListenConflicts() {
	c := k.c
	type l struct{ path, addr string }
	var ls []l
	if c.Proxy != nil {
		ls = append(ls, l{"proxy.listen", c.Proxy.Listen})
	}
	if c.Check != nil {
		ls = append(ls, l{"check.listen", c.Check.Listen})
	}
	if c.Envoy != nil {
		ls = append(ls, l{"envoy.listen", c.Envoy.Listen})
	}
	if c.Postgres != nil {
		ls = append(ls, l{"postgres.listen", c.Postgres.Listen})
	}
	if c.Admin != nil && c.Admin.Listen != "" {
		ls = append(ls, l{"admin.listen", c.Admin.Listen})
	}
	for i := range ls {
		for j := range i {
			if conflict(ls[i].addr, ls[j].addr) {
				k.errf(ls[i].path, "%s is also %s; give each listener its own port", ls[i].addr, ls[j].path)
			}
		}
	}
}

func conflict(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	return ha == hb || ha == "" || hb == "" || ha == "0.0.0.0" || hb == "0.0.0.0" || ha == "::" || hb == "::"
}

// FloodgatePolicies returns the library policies of the file: those under
// policies by name, and the PostgreSQL proxy's levels as
// "postgres.global", "postgres.per_user" and "postgres.per_ip".
//
// A policy with tiers has Tiers set and TierOf nil: the daemon picks a
// tier per request (tier_header), so the caller sets TierOf, or builds one
// policy per tier, before floodgate.New. The error, for a Config changed
// after Parse, is an Errors with the positions of the offending fields.
func (c *Config) FloodgatePolicies() (map[string]floodgate.Policy, error) {
	d := yamlpos.New(c.File)
	if c.pos != nil {
		d.Pos = c.pos
	}
	k := &checker{c: c, d: d}
	out := map[string]floodgate.Policy{}
	for name, p := range c.Policies {
		fp := k.buildPolicy(yamlpos.MapKeyPath("policies", name), name, &p.LimitsSpec, p.Local, p.Overrides, p.Tiers)
		fp.Penalty = p.Penalty.D()
		out[name] = fp
	}
	if c.Postgres != nil {
		for _, lv := range c.Postgres.RateLimit.levels() {
			if lv.limit != nil {
				fp := k.buildPolicy("postgres.rate_limit."+lv.field, lv.policy, &lv.limit.LimitsSpec, nil, lv.limit.Overrides, nil)
				fp.Penalty = lv.limit.Penalty.D()
				out[lv.policy] = fp
			}
		}
		for _, cl := range c.Postgres.Connections.levels() {
			if cl.limit != nil {
				out[cl.policy] = k.buildPolicy("postgres.connections."+cl.field, cl.policy, cl.limit, nil, nil, nil)
			}
		}
	}
	if len(d.Errs) > 0 {
		return nil, d.Errs.Sorted()
	}
	return out, nil
}

func (k *checker) checkTelemetry() {
	t := k.c.Telemetry
	switch t.Protocol {
	case TelemetryGRPC, TelemetryHTTP:
	default:
		k.errf("telemetry.protocol", "%q is not a protocol: use grpc or http", t.Protocol)
	}
	if t.Endpoint != "" {
		if strings.Contains(t.Endpoint, "://") {
			if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				k.errf("telemetry.endpoint", "%q is not an http:// or https:// URL with a host; or give host:port", t.Endpoint)
			}
		} else if _, _, err := net.SplitHostPort(t.Endpoint); err != nil {
			k.errf("telemetry.endpoint", "%q is neither host:port nor a URL: %v", t.Endpoint, err)
		}
	}
	k.resolve(&t.CAFile)
	if t.CAFile != "" {
		if raw, err := os.ReadFile(t.CAFile); err != nil {
			k.wrapf("telemetry.ca_file", err, "%v", err)
		} else {
			k.files[t.CAFile] = raw
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.HeaderFiles)) {
		file := t.HeaderFiles[name]
		if _, both := t.Headers[name]; both {
			k.errf("telemetry.header_files."+name, "header %s is under headers too; give it in one of them", name)
			continue
		}
		k.resolve(&file)
		v, raw, err := readSecret(file)
		if err != nil {
			k.wrapf("telemetry.header_files."+name, err, "%v", err)
			continue
		}
		k.files[file] = raw
		t.HeaderFiles[name] = file
		if t.Headers == nil {
			t.Headers = map[string]string{}
		}
		t.Headers[name] = v
	}
	if len(t.Signals) == 0 {
		k.errf("telemetry.signals", "name metrics, traces or both; leave the field out for both, or the section out for neither")
	}
	for _, s := range t.Signals {
		if s != TelemetryMetrics && s != TelemetryTraces {
			k.errf("telemetry.signals", "%q is not a signal: use metrics or traces", s)
		}
	}
	if t.MetricsInterval <= 0 {
		k.errf("telemetry.metrics_interval", "must be positive; leave it out for the default 60s")
	}
	if !(t.SamplingRatio >= 0 && t.SamplingRatio <= 1) {
		k.errf("telemetry.sampling_ratio", "%v is not a ratio from 0 to 1", t.SamplingRatio)
	}
}
