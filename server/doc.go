// Package server holds the front ends of the floodgate daemon: the
// rate-limiting reverse proxy, the HTTP check API, the Envoy rate limit
// service and the admin listener, and a Server that runs them with graceful
// shutdown.
//
// It is built from library types only: floodgate.Limiter decides,
// httplimit.Rule says how a proxied request is keyed and charged, and
// failover's failure policies say what happens when Redis is down. The
// configuration structs map one to one onto the daemon's YAML file:
//
//	proxy:                       ProxyConfig
//	  listen, upstream             Listen, Upstream
//	  tls: {cert, key}             TLS *TLSFiles{Cert, Key}
//	  trusted_proxies              TrustedProxies
//	  headers, body                Headers httplimit.Headers, Body httplimit.Body
//	  routes:                      Routes []Route
//	    - match: {host, path_prefix, path, methods}   Match{Host, PathPrefix, Path, Methods}
//	      shadow                   Shadow
//	      limits: [{policy, key, cost, count}]        Limits []httplimit.Rule{Limiter, Key, Cost, Count}
//	check: {listen, timeout}     CheckConfig{Listen, Timeout}; policies → Policies
//	envoy: {listen, response_headers}                 EnvoyConfig{Listen, ResponseHeaders}
//	  ratelimit_config             Descriptors (the config package's matcher)
//	admin: {listen, pprof, token}                     AdminConfig{Listen, Pprof, Token}
//
// Reloads replace what changed while serving: Proxy.SetRoutes,
// CheckAPI.SetPolicies and RLS.SetDescriptors swap atomically, and a
// request sees the old set or the new one, never a mix.
//
// # Responses
//
// The proxy answers with httplimit's header fields and bodies (429 with a
// problem detail, 503 when the engine fails closed), and 502 when the
// upstream cannot be reached; a count-failed rule counts that 502. The
// check API answers 200, 429, 503 (fail-closed, or undecided within its
// timeout) or 400 with JSON and the same header fields. The Envoy service
// answers OK / OVER_LIMIT per descriptor; see RLS for the mapping of
// failures. Denials are logged at debug level, and at info level at most one
// a second; keys are always redacted (floodgate.RedactKey).
//
// # Header fields outside the middleware
//
// httplimit writes its header fields only around a handler it wraps, so the
// check API and the Envoy service format the same fields from their
// decisions themselves (headers.go), following httplimit's documented
// formats. An exported httplimit function that writes the fields of a
// decision — the checks decided and the index of the driving one — into an
// http.Header would replace that copy.
package server
