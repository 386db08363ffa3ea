// Package outbound calls rate-limited APIs politely: an http.RoundTripper
// that limits a client's own calls and obeys what the servers it calls
// say, for the side of rate limiting where a 429 costs you, not them.
//
//	lim, _ := floodgate.New(store, floodgate.Policy{Name: "partner-api",
//		Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
//	tr, _ := outbound.New(outbound.Options{Limiter: lim})
//	client := &http.Client{Transport: tr}
//
// A request through a Transport
//
//   - waits until its upstream is not paused, then for a unit of its
//     budget (any floodgate.Limiter: memstore for one process, redisstore
//     for one quota shared by every instance);
//   - is sent under its upstream's circuit breaker (a failover.Breaker, counting
//     transport errors and 500/502/503/504 answers);
//   - has its answer read (ParseAdvice: Retry-After as seconds or an
//     HTTP-date, the IETF RateLimit fields, X-RateLimit-*): a 429, a 503
//     with Retry-After, or an answer that says nothing is left pauses
//     every caller of the upstream until the time named (MemoryPauses for
//     one process, RedisPauses for all of them);
//   - when refused with 429 or 503 and safe to send again (an idempotent
//     method, an Idempotency-Key, or a Retryable context, with a body
//     that can be rewound), is sent again after the pause or a jittered
//     back-off, at most MaxRetries times;
//   - teaches the Transport the rate its upstream really admits: after a
//     refusal, requests to it are paced at a learned rate, halved on
//     refusals and raised step by step after runs of admitted answers
//     (Transport.LearnedRate).
//
// No wait goes past the request's context: a request whose deadline comes
// before its budget or its upstream's pause fails at once with ErrDeadline
// and charges nothing; a refusal whose retry could not fit is returned as
// it is. What the Transport does is reported to an Observer;
// metrics.NewOutbound exports it to Prometheus.
//
// docs/outbound.md shows complete programs.
package outbound
