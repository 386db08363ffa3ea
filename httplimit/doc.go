// Package httplimit is rate-limiting net/http middleware over any
// floodgate.Limiter.
//
//	store := memstore.New(memstore.Options{})
//	api, _ := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(100)}})
//	mw, err := httplimit.New(httplimit.Config{
//		Rules: []httplimit.Rule{{Limiter: api}},
//	})
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// The package takes a limiter and links no engine; package httplimit/quick
// builds the one-line forms (quick.LimitByIP and its kin), which choose the
// engine themselves.
//
// A Middleware checks every Rule that matches a request. A rule names its
// limiter, the key of a request (client address, user, API key, route, or a
// combination: see KeyFunc), its cost, and which responses count. When a
// rule denies, the units charged by the rules before it are refunded, so a
// global → per-user → per-IP chain charges nothing for a request any link
// refuses.
//
// # Responses
//
// A request that passes reaches the wrapped handler with the rate-limit
// header fields already set. A request that is denied gets 429 Too Many
// Requests with the same fields, Retry-After, and an RFC 9457 problem
// detail:
//
//	HTTP/1.1 429 Too Many Requests
//	Content-Type: application/problem+json
//	Ratelimit: "api";r=0;t=1
//	Ratelimit-Policy: "api";q=100;w=60
//	Retry-After: 1
//	X-Ratelimit-Limit: 100
//	X-Ratelimit-Remaining: 0
//	X-Ratelimit-Reset: 60
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Too many requests; retry in 1 second.","retry-after":1,"violated-policies":["api"]}
//
// The fields, when several rules apply, describe the most restrictive
// decision: the rule that denied, or the one with the fewest units left.
//
//   - X-RateLimit-Limit: the most units the deciding limit admits at once
//     (its burst; the rate when there is no separate burst).
//   - X-RateLimit-Remaining: the units that could still pass now, after this
//     request's charge.
//   - X-RateLimit-Reset: the seconds, rounded up, until the deciding
//     limit is full again; with Headers.UnixReset, the Unix time of that
//     instant.
//   - Retry-After (429 only): the seconds, rounded up and at least 1, after
//     which the same request passes if nothing else is charged; a client
//     that waits exactly this long is never turned away for coming early. A
//     request that costs more than the limit's capacity can never pass and
//     gets no Retry-After.
//   - RateLimit-Policy and RateLimit, as draft-ietf-httpapi-ratelimit-headers-10
//     defines them: the policy lists one item per limit of every rule that
//     applied, named after the policy ("api", or "api/1", "api/2" for a
//     policy of several limits), with q units per w seconds; a window that is
//     not a whole number of seconds is rounded up, with q scaled down. A
//     token bucket whose burst differs from its rate is q = its burst per
//     w = the seconds it takes to fill up again (10/min, burst 5: q=5;w=30),
//     so that q, X-RateLimit-Limit and the remaining counts describe one
//     quantity, and q/w is the sustained rate.
//     RateLimit has one item per decided rule, each with its own deciding
//     limit's remaining units r and t: the seconds until that limit is
//     full again (as X-RateLimit-Reset), or on a 429 the Retry-After value,
//     since the draft forbids a Retry-After that points earlier than t.
//     Everything is read from the Results (Result.Set names the limits that
//     applied), so a wrapper around a limiter loses no field.
//   - X-RateLimit-Source (off by default): what decided, e.g. "memory" or
//     "local-fallback".
//
// Each family can be turned off in Headers. net/http writes the names in
// its canonical form (X-Ratelimit-Limit); HTTP field names are
// case-insensitive.
//
// # Choosing keys
//
// The key says who "one client" is, and is the decision that matters most.
// KeyByIP keys by address and reads X-Forwarded-For or Forwarded only from
// trusted proxies (package clientip), so that a client cannot choose its own
// key by sending the header; it limits a whole office behind one NAT as one
// client. KeyByUser keys authenticated users by account and the rest by
// address. KeyByHeader keys by an API key, which is only as good as the check
// that the key is real. JoinKeys combines keys, for example address and
// submitted login (KeyByFormValue) against password guessing. Two rules must
// use limiters of different policy names: a policy's name keeps its state
// apart on a shared store, and overrides and tiers see the key as the key
// function wrote it. See docs/keys.md in the repository for the trade-offs.
//
// # Counting failures only
//
// Against password guessing, count only failed logins: Rule.Count =
// CountFailed. Every attempt is charged before the handler runs, so
// concurrent guesses cannot overrun the limit, and an attempt that succeeds
// (status below 400) is refunded after the handler answers. A panicking
// handler counts as a failure. CountSuccessful is the reverse.
//
// # Errors
//
// A limiter that cannot decide (an engine failure that its failure mode did
// not absorb, a closed store, one key's corrupt state) never turns into a
// 500 or a panic. By default the request is served without rate-limit
// headers (ServeOnError) and the error is logged, at most once a second;
// UnavailableOnError answers 503 instead, and Config.OnError can do anything
// else. A negative cost from a Rule's Cost function is a bug in the server,
// not in the limiter: it is answered 500 and logged, never served unlimited. Engines have failure policies of their own that can fall
// back to local limits, which is usually better than either. A denial whose
// Source is fail-closed (the engine's policy refused because Redis is down)
// is answered 503 with Retry-After, not 429; a fail-open admission is served
// without quota headers.
//
// # Other frameworks
//
// The middleware is two halves that front ends can use apart. Evaluate runs
// the rules on an *http.Request into an Answer, and Begin writes the
// headers and, for a request that is not to be served, the whole answer;
// then the front end runs its handler and settles the Answer with the
// response (Answer.Serve). That is how the gin and echo adapters work. A
// front end without an *http.Request (fasthttp, gRPC) builds a Charge per
// limit itself, lets an Evaluator evaluate them, and writes Answer.Headers, Status,
// ContentType and AppendBody in its own protocol; PeerKeyer keys it by
// client address through the same trusted-proxy rules as KeyByIP. Every
// front end thus sends the same fields and body and keeps the same count
// rules. The adapters live in modules of their own under contrib/.
//
// # Where it goes
//
// Put the middleware after recovery, logging and metrics, so that 429s are
// logged and counted like any other response and a panic below it is
// recovered; after CORS, so that browsers can read the 429; and before
// timeouts, compression and the application, so that a denied request costs
// as little as possible. Rules keyed by user must run after the
// authentication middleware that identifies the user. See
// docs/middleware.md in the repository.
package httplimit
