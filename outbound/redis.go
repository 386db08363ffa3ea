package outbound

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/failover"
)

// DefaultPausePrefix prefixes the Redis keys of RedisPauses.
const DefaultPausePrefix = "floodgate:pause:"

// RedisPausesOptions configures RedisPauses. The zero value gives the
// defaults.
type RedisPausesOptions struct {
	// Prefix is put before the upstream's name to make its key. Empty
	// means DefaultPausePrefix.
	Prefix string

	// Breaker bounds every Redis command with a timeout and a circuit
	// breaker, as failover.BreakerOptions documents (its defaults: a call
	// is slow after 100 ms and cut off at 500 ms; the breaker opens when
	// half of at least 20 calls within 10 s fail). ContextBound is
	// ignored: the bound holds whatever the client's own settings. An
	// empty Name means "pauses".
	Breaker failover.BreakerOptions
}

// RedisPauses is a PauseStore shared through Redis: a pause set by one
// instance holds every instance that asks. A pause is one key per
// upstream whose TTL is the pause (so it ends on Redis' clock, not on any
// instance's, and needs no cleaning up); setting it is one script call
// that only ever lengthens it, and asking is one PTTL.
//
// Every pause is also kept in this process, and a pause known here is not
// asked of Redis again until it ends. When Redis fails (an error, a
// timeout, or its breaker open) RedisPauses falls back to those local
// pauses: each instance still obeys the answers it got itself, as a
// MemoryPauses would, and the instances share pauses again as soon as
// Redis answers. A failed write is not repeated later: a pause is short,
// and the next refusal writes a new one.
type RedisPauses struct {
	client redis.UniversalClient
	prefix string
	local  MemoryPauses
	br     *failover.Breaker
}

var _ PauseStore = (*RedisPauses)(nil)

// pauseScript sets a pause of ARGV[1] milliseconds unless a longer one is
// held, and returns the milliseconds of the pause held afterwards. PTTL is
// -2 for no key and -1 for a key without TTL, both below any pause, so
// both are replaced.
var pauseScript = redis.NewScript(`
local ms = tonumber(ARGV[1])
local cur = redis.call('PTTL', KEYS[1])
if cur < ms then
	redis.call('SET', KEYS[1], '1', 'PX', ms)
	return ms
end
return cur
`)

// NewRedisPauses returns a RedisPauses on client.
func NewRedisPauses(client redis.UniversalClient, o RedisPausesOptions) (*RedisPauses, error) {
	if client == nil {
		return nil, errors.New("outbound: no Redis client given")
	}
	p := &RedisPauses{client: client, prefix: o.Prefix}
	if p.prefix == "" {
		p.prefix = DefaultPausePrefix
	}
	bo := o.Breaker
	bo.ContextBound = false
	if bo.Name == "" {
		bo.Name = "pauses"
	}
	br, err := failover.NewBreaker(bo)
	if err != nil {
		return nil, fmt.Errorf("outbound: RedisPauses: %w", err)
	}
	p.br = br
	return p, nil
}

// Stats returns the counters of the Breaker in front of Redis (for
// metrics.WatchGuard).
func (p *RedisPauses) Stats() failover.Stats { return p.br.Stats() }

// Pause implements PauseStore. A pause of under a millisecond is not
// written to Redis.
//
// The pause Redis holds afterwards, which another instance may have made
// longer, is what this process keeps.
func (p *RedisPauses) Pause(ctx context.Context, upstream string, until time.Time) {
	p.local.Pause(ctx, upstream, until)
	ms := time.Until(until).Milliseconds()
	if ms <= 0 {
		return
	}
	// The call may run on a goroutine of the Breaker's that outlives a
	// timeout: held is read only when it succeeded.
	var held int64
	err := p.br.Do(ctx, func(ctx context.Context) error {
		n, err := pauseScript.Run(ctx, p.client, []string{p.prefix + upstream}, ms).Int64()
		held = n
		return err
	})
	if err == nil && held > ms {
		p.local.Pause(ctx, upstream, time.Now().Add(time.Duration(held)*time.Millisecond))
	}
}

// PausedUntil implements PauseStore.
func (p *RedisPauses) PausedUntil(ctx context.Context, upstream string) time.Time {
	if t := p.local.PausedUntil(ctx, upstream); !t.IsZero() {
		return t
	}
	var ttl time.Duration
	err := p.br.Do(ctx, func(ctx context.Context) error {
		d, err := p.client.PTTL(ctx, p.prefix+upstream).Result()
		ttl = d
		return err
	})
	if err != nil || ttl <= 0 {
		// No pause (PTTL's -2 and -1 are negative), or Redis failed: the
		// local pauses, none here, are the answer.
		return time.Time{}
	}
	until := time.Now().Add(ttl)
	p.local.Pause(ctx, upstream, until)
	return until
}
