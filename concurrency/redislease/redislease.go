// Package redislease is a concurrency.Store in Redis: the slots of a
// concurrency limit shared by every instance, held as leases that run out
// when their holder dies.
//
// Each key of a limit is one sorted set, its members the holders' tokens
// scored by the Redis time at which their lease runs out; one Lua script
// acquires, renews and releases, so that two instances never both take the
// last slot. A concurrency.Permit renews its lease every third of it while
// it is held (the heartbeat), so a slow holder keeps its slot as long as its
// process lives, and a process killed without a word (SIGKILL, a lost
// machine) frees its slots within one lease.
//
// The key of limit name and client key is
//
//	<prefix>{<name>:concurrency:<key>}:lease
//
// escaped as package redisstore escapes its own keys: the braces make the
// whole key its Redis Cluster hash tag, so every script call touches one
// slot, and distinct keys stay distinct.
//
// Every call to Redis goes through a failover.Breaker (a per-call timeout
// and a circuit breaker), and a failure is decided by Options.Mode, as for
// the rate engines: FailOpen admits without a slot, FailClosed refuses
// (concurrency.ReasonFailClosed, a 503), LocalFallback holds the slot in a
// concurrency.Local of this process, so each instance enforces the whole
// limit on its own until Redis is back. To let one breaker judge one Redis
// for rate limits and concurrency alike, give this package the Breaker of
// the Guard the rate engines use (Options.Breaker: guard.Breaker()).
package redislease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// Source is the Source of the decisions Redis made.
const Source floodgate.Source = "redis"

// DefaultLease is how long a hold lasts without renewal: long enough that
// a holder whose renewals meet a Redis hiccup (two in a row fail, at the
// Breaker's timeout each) keeps its slot, short enough that a dead holder's
// slots come back soon.
const DefaultLease = 10 * time.Second

//go:embed scripts/lease.lua
var leaseSource string

var leaseScript = redis.NewScript(leaseSource)

// Options configures a Store.
type Options struct {
	// Prefix starts every key; empty means redisstore.DefaultPrefix. It
	// follows redisstore's rules (no braces), which New checks with
	// redisstore itself.
	Prefix string

	// Lease is how long a hold lasts unless renewed. 0 means
	// DefaultLease. It must be at least three times the Breaker's timeout,
	// so that a renewal that times out leaves time for another.
	Lease time.Duration

	// Mode decides what Acquire answers when Redis fails. It must be set.
	Mode failover.Mode

	// Local is the store LocalFallback holds slots in; nil means a
	// concurrency.Local of the Store's own. Only LocalFallback uses it.
	Local concurrency.Store

	// Breaker is the Breaker of a rate engine's Guard over the same Redis
	// (Guard.Breaker of the Guard failover.New and hybrid.New take as their
	// remote store), shared so that one breaker judges that Redis. Nil
	// means a Breaker of the Store's own, made with BreakerOptions.
	Breaker *failover.Breaker

	// BreakerOptions configures the Store's own Breaker when Breaker is
	// nil.
	BreakerOptions failover.BreakerOptions
}

// Store is a concurrency.Store in Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
	lease  time.Duration
	mode   failover.Mode
	local  concurrency.Store
	br     *failover.Breaker
}

var _ concurrency.Store = (*Store)(nil)

// New returns a Store over client. The Store does not own client.
func New(client redis.UniversalClient, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redislease: no client given; pass a redis.UniversalClient")
	}
	switch o.Mode {
	case failover.FailOpen, failover.FailClosed, failover.LocalFallback:
	default:
		return nil, fmt.Errorf("redislease: choose a failure mode (failover.FailOpen, FailClosed or LocalFallback); got %s", o.Mode)
	}
	if o.Local != nil && o.Mode != failover.LocalFallback {
		return nil, fmt.Errorf("redislease: Local is used only by LocalFallback, not by %s", o.Mode)
	}
	// The prefix follows redisstore's rules: ask redisstore.
	rs, err := redisstore.New(client, redisstore.Options{Prefix: o.Prefix})
	if err != nil {
		return nil, fmt.Errorf("redislease: %w", err)
	}
	rs.Close()
	s := &Store{client: client, prefix: o.Prefix, lease: o.Lease, mode: o.Mode, local: o.Local, br: o.Breaker}
	if s.prefix == "" {
		s.prefix = redisstore.DefaultPrefix
	}
	if s.lease == 0 {
		s.lease = DefaultLease
	}
	if s.br == nil {
		if s.br, err = failover.NewBreaker(o.BreakerOptions); err != nil {
			return nil, fmt.Errorf("redislease: %w", err)
		}
	}
	if s.lease < 3*s.br.Timeout() {
		return nil, fmt.Errorf("redislease: lease %s is below three times the Breaker's timeout (%s): a renewal that times out would leave no time for another", s.lease, s.br.Timeout())
	}
	if s.mode == failover.LocalFallback && s.local == nil {
		s.local = concurrency.NewLocal()
	}
	return s, nil
}

// Breaker returns the Breaker that calls Redis, for its State and Stats.
func (s *Store) Breaker() *failover.Breaker { return s.br }

// Lease returns the lease in force.
func (s *Store) Lease() time.Duration { return s.lease }

// Key returns the Redis key of limit name's key, in the layout the package
// documentation describes.
func (s *Store) Key(name, key string) string { return leaseKey(s.prefix, name, key) }

func leaseKey(prefix, name, key string) string {
	k := redisstore.Key(prefix, keySet(name), floodgate.NormalizeKey(key), 0)
	// redisstore's key ends in the limit's index and kind ("0g"); a lease
	// set is neither.
	return k[:len(k)-2] + "lease"
}

// keySet names a limit's keys through redisstore.Key: the variant
// "concurrency" is one no policy list has, so that no rate limit's key is
// ever a lease set's.
func keySet(name string) *algo.Set {
	t, err := algo.New(algo.Spec{Kind: algo.GCRA, Rate: 1, Period: time.Second})
	if err == nil {
		var set *algo.Set
		if set, err = algo.NewSet(name, "concurrency", []algo.Transition{t}); err == nil {
			return set
		}
	}
	panic("redislease: " + err.Error())
}

// Acquire implements concurrency.Store.
func (s *Store) Acquire(ctx context.Context, name, key, token string, limit int, ttl time.Duration) (concurrency.Grant, error) {
	if ttl <= 0 {
		ttl = s.lease
	}
	held, n, err := s.run(ctx, name, key, "acquire", token, ttl, limit)
	if err == nil {
		g := concurrency.Grant{Acquired: held, InFlight: n, Source: Source}
		if held {
			g.Lease = ttl
		}
		return g, nil
	}
	if failover.Refusal(err) || ctx.Err() != nil {
		return concurrency.Grant{InFlight: -1}, err
	}
	switch s.mode {
	case failover.FailOpen:
		return concurrency.Grant{Acquired: true, InFlight: -1, Source: floodgate.SourceFailOpen}, nil
	case failover.FailClosed:
		return concurrency.Grant{InFlight: -1, Source: floodgate.SourceFailClosed, RetryAfter: s.br.RetryIn()}, nil
	}
	g, err := s.local.Acquire(ctx, name, key, token, limit, 0)
	g.Source, g.Lease = failover.SourceLocalFallback, 0
	return g, err
}

// Renew implements concurrency.Store.
func (s *Store) Renew(ctx context.Context, name, key, token string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		ttl = s.lease
	}
	held, _, err := s.run(ctx, name, key, "renew", token, ttl, 0)
	return held, err
}

// Release implements concurrency.Store. A release that fails leaves the
// slot to expire with its lease.
func (s *Store) Release(ctx context.Context, name, key, token string) error {
	if s.local != nil {
		s.local.Release(ctx, name, key, token)
	}
	_, _, err := s.run(ctx, name, key, "release", token, 0, 0)
	return err
}

// InFlight returns the number of live holders of limit name's key, for
// tests and status pages.
func (s *Store) InFlight(ctx context.Context, name, key string) (int, error) {
	_, n, err := s.run(ctx, name, key, "count", "", 0, 0)
	return n, err
}

// run calls the script through the Breaker. An error names the limit and
// the operation.
func (s *Store) run(ctx context.Context, name, key, op, token string, ttl time.Duration, limit int) (bool, int, error) {
	k := leaseKey(s.prefix, name, key)
	var held bool
	var n int
	err := s.br.Do(ctx, func(ctx context.Context) error {
		v, err := leaseScript.Run(ctx, s.client, []string{k}, op, token, ttl.Milliseconds(), limit).Int64Slice()
		switch {
		case err != nil && strings.HasPrefix(err.Error(), "FLOODGATE_CORRUPT"):
			return fmt.Errorf("%w: redis key %s: %s; delete it, and give floodgate a prefix no other program writes under",
				floodgate.ErrCorruptState, floodgate.RedactKey(k), strings.TrimPrefix(err.Error(), "FLOODGATE_CORRUPT "))
		case err != nil:
			return err
		case len(v) != 2:
			return fmt.Errorf("redislease: script answered %d values, want 2", len(v))
		}
		held, n = v[0] == 1, int(v[1])
		return nil
	})
	if err != nil {
		return false, 0, fmt.Errorf("redislease: limit %s: %s: %w", name, op, err)
	}
	// Do returned after fn did, so held and n are complete.
	return held, n, nil
}
