package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/internal/chargedenied"
)

// Defaults for Options' zero values.
const (
	// DefaultPrefix starts every key the Store writes.
	DefaultPrefix = "floodgate:"

	// DefaultMaxBatch is the most requests one round trip carries.
	DefaultMaxBatch = 128

	// DefaultFlushers is the number of round trips a Store keeps in flight.
	DefaultFlushers = 2

	// DefaultMaxPending is the most requests that may wait for a round trip.
	DefaultMaxPending = 1 << 16

	// DefaultTimeout bounds a request whose context has no deadline.
	DefaultTimeout = time.Second
)

// Options configures a Store. The zero value is a good default.
type Options struct {
	// Prefix starts every key, so that several applications (or tests)
	// can share one Redis. Empty means DefaultPrefix. It may not hold '{'
	// or '}': the braces after it make each key's Redis Cluster hash tag.
	Prefix string

	// Clock pins the time for tests: when set, every script call takes its
	// time from Clock instead of from Redis (TIME). Production code must
	// leave it nil, so that every instance sharing a Redis decides on the
	// same clock, Redis's, whatever their own clocks say.
	Clock clock.Clock

	// MaxBatch is the most requests a round trip to Redis carries, and so
	// the most one script call decides. 0 means DefaultMaxBatch. 1 turns
	// batching off: every round trip carries one script call deciding one
	// request, as redis_rate does; raise Flushers with it to keep several
	// in flight.
	MaxBatch int

	// Flushers is the number of goroutines that send batches: up to this
	// many round trips are in flight at once. 0 means DefaultFlushers.
	// More flushers cut waiting when Redis is remote or batching is off;
	// against a local Redis two are enough to keep it busy.
	Flushers int

	// MaxPending bounds the requests waiting to be sent. A request that
	// finds the queue full fails at once with ErrOverloaded instead of
	// waiting behind a Redis that does not keep up. 0 means
	// DefaultMaxPending.
	MaxPending int

	// Timeout bounds a Decide, Refund or Reset whose context has no
	// deadline: after it, the call fails with an *Error wrapping
	// context.DeadlineExceeded, however the client is configured (a
	// go-redis client left to its defaults waits up to 3s for a read, and
	// an unreachable Redis would otherwise cost every request its dial
	// attempts). A context with a deadline is used as it is, even when its
	// deadline is later. 0 means DefaultTimeout; a negative Timeout lets
	// calls without a deadline wait for Redis as long as the client does.
	Timeout time.Duration
}

// Errors callers branch on with errors.Is. Every error a Store returns is
// an *Error that names the operation.
var (
	// ErrClosed reports a request to a Store after Close. It is
	// floodgate.ErrClosed, which failure modes never absorb.
	ErrClosed = floodgate.ErrClosed

	// ErrOverloaded reports a request that found Options.MaxPending requests
	// already waiting: Redis is too slow or unreachable.
	ErrOverloaded = errors.New("too many requests waiting for redis (Options.MaxPending); check redis's health and latency")

	// ErrCorruptState reports a request that found, under one of its keys,
	// state floodgate did not write: a key of another type, a value that
	// does not parse, or an instant out of the limit's reach. Only that
	// request fails, and it has changed nothing in Redis; the other
	// requests of its batch, and other clients, are decided as usual.
	// Redis itself is working, so failure modes (package failover, hybrid)
	// do not count it as an outage: it is floodgate.ErrCorruptState.
	// errors.As finds the *CorruptStateError, which names the key.
	ErrCorruptState = floodgate.ErrCorruptState
)

// A CorruptStateError is a request that met, under one of its keys, state
// floodgate did not write, typically another program's key under
// Options.Prefix. floodgate neither reads such a key as empty (which would
// overwrite the other program's data, and hide the problem) nor trusts it
// (a TAT of "1e300" would deny the client forever): it fails the request,
// every time, until the key is deleted. errors.Is(err, ErrCorruptState)
// reports true for it.
type CorruptStateError struct {
	// Key is the Redis key, in full. It contains the client key, which
	// Error leaves out so that logs do not carry it.
	Key string
	// Problem says what the key holds, e.g. "holds a hash, not a string".
	Problem string

	redacted string // Key with the client key elided
}

// Error names the key, the client key elided, and says what to do.
func (e *CorruptStateError) Error() string {
	return "redis key " + e.redacted + " " + e.Problem + "; floodgate did not write it: delete it (the Limiter's Reset for this client key, or DEL), and give floodgate an Options.Prefix that no other program writes under"
}

// Is reports whether target is ErrCorruptState.
func (e *CorruptStateError) Is(target error) bool { return target == ErrCorruptState }

// An Error is a request the Store could not complete. Err says why: a
// context error (context.DeadlineExceeded, context.Canceled) when the
// caller's context ended first or Options.Timeout passed, a network error
// (net.Error) or a Redis error reply (redis.Error) from go-redis,
// ErrOverloaded, ErrClosed, or a *CorruptStateError (ErrCorruptState).
//
// A decide or refund that failed with a *CorruptStateError, ErrOverloaded
// or ErrClosed changed nothing. Any other may or may not have been applied:
// a request whose wait ended while its round trip was in flight has still
// been decided (and, if allowed, charged) in Redis, once.
type Error struct {
	// Op is "decide", "refund" or "reset".
	Op string
	// Err is the cause.
	Err error
}

// Error formats the error as "redisstore: <op>: <cause>".
func (e *Error) Error() string { return "redisstore: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// A Store keeps limit state in Redis. It is safe for concurrent use by any
// number of goroutines and Limiters.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	clock      clock.Clock
	group      groupMode
	maxBatch   int
	maxPending int
	timeout    time.Duration // < 0: none

	mu      sync.Mutex
	wake    *sync.Cond // flushers wait on it for requests
	pending []*request // pending[head:] wait, oldest first
	head    int
	idle    int // flushers waiting on wake
	closed  bool

	// abandoned counts the queued requests whose callers stopped waiting;
	// enqueue sweeps them out once they are half the queue.
	abandoned atomic.Int64

	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	flushers sync.WaitGroup
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store over client: a *redis.Client (standalone or
// Sentinel's failover client), a *redis.ClusterClient, or any other
// redis.UniversalClient. It starts the Store's flushers but does not talk
// to Redis: a Redis that is down when the service starts fails requests,
// not New. The script is loaded on first use, and again on any server that
// does not know it (NOSCRIPT after a restart, a failover or SCRIPT FLUSH).
//
// The Store does not own client: Close the client after the Store.
func New(client redis.UniversalClient, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: no client given; pass a redis.UniversalClient")
	}
	switch {
	case o.MaxBatch < 0:
		return nil, fmt.Errorf("redisstore: MaxBatch %d is negative; use 0 for the default (%d)", o.MaxBatch, DefaultMaxBatch)
	case o.Flushers < 0:
		return nil, fmt.Errorf("redisstore: Flushers %d is negative; use 0 for the default (%d)", o.Flushers, DefaultFlushers)
	case o.MaxPending < 0:
		return nil, fmt.Errorf("redisstore: MaxPending %d is negative; use 0 for the default (%d)", o.MaxPending, DefaultMaxPending)
	case strings.ContainsAny(o.Prefix, "{}"):
		return nil, fmt.Errorf("redisstore: Prefix %q holds a brace, which would change the Redis Cluster hash tag of every key; remove it", o.Prefix)
	}
	s := &Store{
		client:     client,
		prefix:     o.Prefix,
		clock:      o.Clock,
		group:      groupModeOf(client),
		maxBatch:   o.MaxBatch,
		maxPending: o.MaxPending,
		timeout:    o.Timeout,
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.maxBatch == 0 {
		s.maxBatch = DefaultMaxBatch
	}
	if s.maxPending == 0 {
		s.maxPending = DefaultMaxPending
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	flushers := o.Flushers
	if flushers == 0 {
		flushers = DefaultFlushers
	}
	s.wake = sync.NewCond(&s.mu)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.flushers.Add(flushers)
	for range flushers {
		go s.flush()
	}
	return s, nil
}

// Close stops the Store: requests still waiting to be sent fail with
// ErrClosed, as does any later request. Round trips in flight are cancelled
// (their callers get context.Canceled) and Close waits for the flushers to
// return, which a hung Redis can delay by up to the client's read timeout
// unless the client honours contexts (ContextTimeoutEnabled). Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	left := s.pending[s.head:]
	s.pending, s.head = nil, 0
	s.wake.Broadcast()
	s.mu.Unlock()
	for _, r := range left {
		if r.state.CompareAndSwap(stateQueued, stateTaken) {
			r.finish(ErrClosed)
		}
	}
	s.cancel()
	s.flushers.Wait()
	return nil
}

// Source is the Source of the decisions a Store makes.
const Source = "redis"

// ValidateLimit implements floodgate.Store: it rejects, when the
// Limiter is built, limits that Redis's microsecond clock and Lua's
// numbers cannot keep exactly.
func (s *Store) ValidateLimit(l floodgate.Limit) error { return validateLimit(l) }

// maxExact is 2^52: a margin below 2^53, where Lua's numbers (doubles)
// stop being exact integers.
const maxExact = 1 << 52

func validateLimit(l floodgate.Limit) error {
	switch l.Spec().Kind {
	case algo.GCRA:
		return validateGCRA(l)
	}
	if l.Period%time.Microsecond != 0 {
		return fmt.Errorf("%w: %s windows must be whole microseconds for the redis engine, got %s; round the period",
			floodgate.ErrInvalidLimit, l.Algorithm, l.Period)
	}
	if l.Rate > maxExact {
		return fmt.Errorf("%w: %s rate %d exceeds 2^52, beyond exact arithmetic in redis's Lua; use a lower rate",
			floodgate.ErrInvalidLimit, l.Algorithm, l.Rate)
	}
	if l.Algorithm == floodgate.SlidingWindow && (l.Rate+2) > maxExact/periodMicros(l.Spec()) {
		return fmt.Errorf("%w: sliding_window %d per %s: rate × period in µs exceeds 2^52, beyond exact arithmetic in redis's Lua; use a shorter period, a lower rate or gcra",
			floodgate.ErrInvalidLimit, l.Rate, l.Period)
	}
	return nil
}

// validateGCRA rejects GCRA limits that microseconds cannot keep within
// 1% of their rate (algo.Interval), and those whose bucket spans more time
// than Lua's numbers hold exactly.
func validateGCRA(l floodgate.Limit) error {
	iv, err := algo.Interval(l.Spec(), time.Microsecond)
	if err != nil {
		return fmt.Errorf("the redis engine counts whole microseconds: %w", err)
	}
	if iv > maxExact/4/l.Capacity() {
		return fmt.Errorf("%w: %s spans %d × %dµs, beyond exact arithmetic in redis's Lua; use a smaller burst or a higher rate",
			floodgate.ErrInvalidLimit, l, l.Capacity(), iv)
	}
	return nil
}

// Decide implements floodgate.Store: one atomic script call decides every
// limit of set, batched with concurrent requests.
func (s *Store) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	r, err := s.do(ctx, opDecide, set, key, cost)
	if err != nil {
		return algo.Verdict{}, err
	}
	res := set.Combine(r.ds[:set.Len()], Source)
	s.release(r)
	return res, nil
}

// Refund implements floodgate.Store.
func (s *Store) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	if plainSet(set) && chargedenied.On(ctx) {
		return s.plainRefund(ctx, set, key, cost)
	}
	r, err := s.do(ctx, opRefund, set, key, cost)
	if err != nil {
		return err
	}
	s.release(r)
	return nil
}

// Reset implements floodgate.Store: it deletes key's state under every
// limit of set.
func (s *Store) Reset(ctx context.Context, set *algo.Set, key string) error {
	r, err := s.do(ctx, opReset, set, key, 0)
	if err != nil {
		return err
	}
	s.release(r)
	if plainSet(set) {
		// The plain count too, whichever way the set is counted now.
		if err := s.plainReset(ctx, set, key); err != nil {
			return &Error{Op: opNames[opReset], Err: err}
		}
	}
	return nil
}
