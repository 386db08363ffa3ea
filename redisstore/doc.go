// Package redisstore is floodgate's Redis engine: limit state kept in Redis,
// so that every instance of a service sharing one Redis (standalone,
// Sentinel or Cluster) enforces one limit together.
//
//	client := redis.NewClient(&redis.Options{
//		Addr: "localhost:6379",
//		// Let deadlines cut short a round trip to a stalled Redis.
//		ContextTimeoutEnabled: true,
//	})
//	store, err := redisstore.New(client, redisstore.Options{})
//	...
//	defer store.Close()
//	lim, err := floodgate.New(store, floodgate.Policy{
//		Name:   "api",
//		Limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(1000)},
//	})
//	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
//	defer cancel()
//	res, err := floodgate.Allow(ctx, lim, "user:42")
//	if err != nil {
//		// Redis is down or slow: fail open or closed here.
//	}
//
// Every call is bounded in time: by its context's deadline or, for a
// context without one, by Options.Timeout (DefaultTimeout). The Store
// never lets go-redis resend a script call (see Failures), so a client's
// MaxRetries cannot charge a decision twice.
//
// # Decisions
//
// Every algorithm of package floodgate has a Lua twin (scripts/*.lua,
// embedded into the binary and joined into a script; a batch without
// sliding limits runs the script without the sliding algorithms, which
// Redis would otherwise define on every call for nothing). One script call
// decides a request under all the limits of its policy atomically and all or
// nothing: it checks every limit, then charges all of them or none, and a
// limit that would have admitted a denied request reports its uncharged
// state, exactly as the in-memory engine does. The per-limit answers come
// back to Go and are folded by algo.Set.Combine. Scripts run with
// EVALSHA; a server that does not know the script (after a restart, a
// failover or SCRIPT FLUSH) answers NOSCRIPT and gets it with EVAL, which
// also loads it for the next calls.
//
// # Time and resolution
//
// Decisions use Redis's clock (TIME), so instances whose clocks disagree
// still share one timeline; Options.Clock replaces it in tests only. Time is
// integer microseconds, the resolution of TIME, and arithmetic is exact:
// Lua's numbers are doubles, exact for integers below 2^53, and every value
// a script computes stays below that (ValidateLimit rejects limits that
// would not). Floor divisions are corrected by their remainder rather than
// trusted to the rounded quotient.
//
// At microsecond resolution:
//
//   - GCRA and TokenBucket refill one unit every Period/Rate rounded up to
//     the microsecond, computed exactly from Period and Rate: rounding up
//     never admits more than the limit's rate. A limit whose rounded
//     interval is more than 1% longer than Period/Rate (PerSecond(600000):
//     1.67µs becomes 2µs, 20% fewer admissions) is rejected; lower its
//     rate, or choose one whose interval is a whole number of
//     microseconds. Where Period/Rate is not a whole number of
//     microseconds (PerSecond(3)), Redis refills each unit up to 1µs later
//     than the in-memory engine, and its Remaining and RetryAfter may
//     differ from it by as much.
//   - Window periods (FixedWindow, SlidingWindow, SlidingLog) must be whole
//     microseconds, and a SlidingWindow's Rate × Period (in µs) must stay
//     below 2^52.
//   - Durations in Results are whole microseconds. Where the exact
//     RetryAfter falls between two (a sliding window's weighted estimate),
//     it is rounded up: the first instant Redis's clock admits the request.
//   - Calendar-aligned fixed windows (Limit.Location) receive the zone's
//     offset from Go, computed at the moment the request is sent. In the
//     milliseconds around a daylight-saving change, a request may be
//     counted in a window aligned to the offset before or after it.
//
// # Keys
//
// The state of limit i (from 0) of a limit set for a client key is kept
// under
//
//	<prefix>{<policy>:<set>:<key>}:<i><tag>
//
// for example floodgate:{api::user:42}:0g. The set is "" for a policy's
// own limits, "override:<key>" or "tier:<name>". In the policy and set
// names, '%', ':', '{' and '}' are percent-encoded (upper-case hex, "%7D"
// for '}'); in the client key, '%' and '}' are, so "a}b" is stored as
// floodgate:{api::a%7Db}:0g. Distinct policies, sets and keys thus never
// share a Redis key. The braces make a Redis Cluster hash tag that always
// covers policy, set and whole client key: every key of one decision lies
// in one slot, as a script call requires, and clients spread over the
// slots whatever their keys hold (the prefix may hold no brace). The
// tag names the algorithm's state, so a limit whose algorithm changes starts
// afresh instead of misreading old state: g (GCRA and TokenBucket: the
// theoretical arrival time, a string), f (FixedWindow: "<end> <count>"), s
// (SlidingWindow: "<expiry> <previous> <current>"), l (SlidingLog: a sorted
// set of admissions, at most Rate members). Key returns the key of a limit.
//
// Each key expires when its state stops carrying information: a GCRA key
// when its bucket is full again, a window key when its window no longer
// counts, a log when its newest admission leaves the period. Memory in Redis
// follows active clients, not every client ever seen.
//
// # Counting as envoyproxy/ratelimit does
//
// A decision whose context is marked by the Envoy service's counting of
// envoyproxy/ratelimit (envoy.descriptors: independent with
// charge_denied: true), on a policy of one fixed window, runs no script:
// the batch's pipeline carries INCRBY of its cost and PEXPIRE NX of the
// time left in the window, and the count INCRBY returns decides
// (admitted while it stays within the limit; a denied request stays
// charged, as the mode asks). Its key is the limit's key with the tag c
// and the window's end in microseconds, for example
// floodgate:{api::user:42}:0c:1767225660000000: a plain integer that
// expires when its window ends. The window is the one that holds this
// process's clock (or Options.Clock), as envoyproxy/ratelimit takes its
// own, so instances whose clocks disagree by d count a request near a
// window's edge in different windows for up to d. PEXPIRE NX needs Redis
// 7; on an older server the PEXPIRE of a new key is sent again without
// NX. A refund of such a decision (Envoy's negative hits) runs a small
// script that never takes the count below zero, and Reset deletes the
// count too. The two ways of counting keep separate state: a policy whose
// mode changes starts a fresh count.
//
// # Batching
//
// A script call per decision would cap a Redis at a few tens of thousands
// of decisions per second, spent mostly on round trips. Instead, Decide,
// Refund and Reset queue their request and wait; Options.Flushers
// goroutines each take up to Options.MaxBatch waiting requests, oldest
// first, and send them in one round trip. Requests whose keys may share a
// script call (all of them on one server; those of one slot in a Cluster)
// go into one call, which runs them in arrival order, each atomic and all
// or nothing on its own. A Cluster batch is sent as one pipeline per node;
// as different clients' keys rarely share a slot, most of its script calls
// decide one request, and the gain is in the round trips saved.
// Batches form by themselves: under light load a request goes out alone at
// once; under heavy load requests gather while earlier round trips are in
// flight. No lock is held during a round trip.
//
// A caller whose context ends stops waiting at once and gets an *Error
// wrapping the context's error. If its request had not been sent yet, it
// never is; if it was in flight, Redis still decides it. Options.MaxPending
// bounds the queue, so that a Redis that cannot keep up fails requests with
// ErrOverloaded rather than queueing them without end.
//
// # Failures
//
// Every error is an *Error naming the operation and wrapping the cause: the
// caller's context error, a network error or a Redis error reply from
// go-redis, ErrOverloaded, ErrClosed or ErrCorruptState. Failure policies
// (fail open, fail closed, fall back to a local limiter) belong to the
// composition above the engine, not here.
//
// # State floodgate did not write
//
// Another program may write under the prefix: a hash where a TAT belongs,
// "1e300", "nan". The script checks every value it reads (type, integer
// form, range: no instant further ahead of Redis's clock than two spans
// of the limit plus a day for a clock that stepped back) before a request
// writes anything, so each request writes all its keys or none. A request
// that meets such a key fails, alone, with a *CorruptStateError
// (errors.Is(err, ErrCorruptState)) that names the key and the problem;
// the other requests of its batch are decided as usual, and nothing is
// charged behind the error. Reading the key as empty instead would hide
// the problem and overwrite the other program's data, and trusting it
// would deny or admit the client on garbage; the error repeats, where an
// operator sees it, until the key is deleted (Reset deletes it). A failure
// policy should not take it for an outage: Redis answered. The reach
// allows for reloads that shorten a limit by up to a day; one that cuts a
// span longer than that (a weekly GCRA limit made hourly) can leave a
// client in debt beyond it, and that client's requests fail the same way
// until its key expires or is reset.
//
// A script call that Redis aborts as a whole still fails every request of
// the call, and may have applied those decided before the abort: Redis
// does not roll a script back. That takes Redis itself failing mid-script,
// such as a write refused for lack of memory under maxmemory-policy
// noeviction.
//
// A caller waits at most until its context's deadline or, without one,
// Options.Timeout; then it gets an *Error wrapping
// context.DeadlineExceeded. The round trip of a batch uses the latest
// deadline of its callers. go-redis applies context deadlines to network
// reads only with redis.Options.ContextTimeoutEnabled; without it, a batch
// stuck on a Redis that stopped answering waits for ReadTimeout, though its
// callers have long returned.
//
// go-redis retries a command after a network error or a timeout
// (MaxRetries, 3 by default). For a script call that would be wrong: a call
// whose reply was lost may have run, and running it again charges its
// requests twice. The Store marks its script calls as not to be retried
// (go-redis's per-command NoRetry), whatever the client's MaxRetries, which
// still applies to the client's other commands: a failed call fails its
// requests, and a request that failed this way may or may not have been
// charged once (see Error). In a Cluster, MOVED and ASK redirections are
// still followed, and a call that fails without a Redis reply makes the
// client reload its slot map, so that a replica promoted after its master
// died is used within about a second.
package redisstore
