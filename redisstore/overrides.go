package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/internal/isnil"
	"github.com/floodgate-go/floodgate/override"
)

// NewOverrides returns an override.Store in Redis, so that every instance on
// client applies the runtime overrides any of them put. The entries are one
// hash and its version one counter, both under prefix (the engine's
// Options.Prefix, so instances that share limits share overrides):
//
//	<prefix>{overrides}          field per entry, its encoding as value
//	<prefix>{overrides}:version  a random number, replaced by every put and delete
//
// The version is random rather than a count so that a Redis that lost its
// data and took as many changes since cannot show an instance the version
// it last read.
// The braces keep both in one Redis Cluster slot. At most
// override.MaxEntries entries are kept. As the list is read, entries that
// expired more than a minute ago (room for clocks that disagree) and
// fields that do not decode are deleted — each only if it still holds what
// was read, so that an entry another instance put meanwhile stays — and
// skipped.
func NewOverrides(client redis.UniversalClient, prefix string) (override.Store, error) {
	if isnil.Value(client) {
		return nil, errors.New("redisstore: no client given; pass a redis.UniversalClient")
	}
	return &overrides{client: client, hash: prefix + "{overrides}", version: prefix + "{overrides}:version"}, nil
}

type overrides struct {
	client        redis.UniversalClient
	hash, version string
}

// expiredGrace is how long after its expiry an entry is deleted: a
// clock a little ahead of the others must not delete what they still
// apply.
const expiredGrace = time.Minute

// The put is one script so that the bound and the version change with the
// entry: -1 when the hash is full and the field new, else 1. ARGV: the new
// version, the field, the entry, the bound.
var putOverride = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], ARGV[1])
return 1`)

// ARGV: the new version, then the fields to delete.
var deleteOverrides = redis.NewScript(`
local n = 0
for i = 2, #ARGV do n = n + redis.call('HDEL', KEYS[1], ARGV[i]) end
if n > 0 then redis.call('SET', KEYS[2], ARGV[1]) end
return n`)

// ARGV: the new version, then pairs of a field and the value it must still
// hold to be deleted.
var dropStaleOverrides = redis.NewScript(`
local n = 0
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i+1] then n = n + redis.call('HDEL', KEYS[1], ARGV[i]) end
end
if n > 0 then redis.call('SET', KEYS[2], ARGV[1]) end
return n`)

// newVersion is a random version other than 0, which an absent counter
// reads as.
func newVersion() string { return strconv.FormatUint(rand.Uint64()|1, 10) }

// field is the hash field of id: the policy, then k or t, then the target,
// NUL-separated (NUL cannot occur in a policy name, and the target runs to
// the end).
func field(id override.ID) string {
	if id.Tier != "" {
		return id.Policy + "\x00t\x00" + id.Tier
	}
	return id.Policy + "\x00k\x00" + id.Key
}

func (o *overrides) Put(ctx context.Context, e override.Entry) error {
	b, err := override.Marshal(e)
	if err != nil {
		return err
	}
	if err := e.Validate(); err != nil {
		return err
	}
	keys := []string{o.hash, o.version}
	for attempt := 0; ; attempt++ {
		n, err := putOverride.Run(ctx, o.client, keys, newVersion(), field(e.ID()), b, override.MaxEntries).Int64()
		if err != nil {
			return fmt.Errorf("redisstore: put override: %w", err)
		}
		if n >= 0 {
			return nil
		}
		if attempt > 0 {
			return override.ErrFull
		}
		// Full: drop the expired entries, then try once more.
		if _, err := o.List(ctx); err != nil {
			return err
		}
	}
}

func (o *overrides) Delete(ctx context.Context, id override.ID) (bool, error) {
	n, err := deleteOverrides.Run(ctx, o.client, []string{o.hash, o.version}, newVersion(), field(id)).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: delete override: %w", err)
	}
	return n > 0, nil
}

func (o *overrides) List(ctx context.Context) ([]override.Entry, error) {
	all, err := o.client.HGetAll(ctx, o.hash).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: list overrides: %w", err)
	}
	cutoff := time.Now().Add(-expiredGrace)
	out := make([]override.Entry, 0, len(all))
	stale := []any{newVersion()}
	for f, v := range all {
		e, err := override.Unmarshal([]byte(v))
		if err != nil || field(e.ID()) != f || e.Expires.Before(cutoff) {
			stale = append(stale, f, v)
			continue
		}
		out = append(out, e)
	}
	if len(stale) > 1 {
		// Housekeeping: the list is right without it, and the next read
		// tries again.
		_ = dropStaleOverrides.Run(ctx, o.client, []string{o.hash, o.version}, stale...).Err()
	}
	override.Sort(out)
	return out, nil
}

func (o *overrides) Version(ctx context.Context) (uint64, error) {
	s, err := o.client.Get(ctx, o.version).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisstore: overrides version: %w", err)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Not one of ours: whatever it holds, a change of it is a change.
		h := fnv.New64a()
		h.Write([]byte(s))
		return h.Sum64(), nil
	}
	return v, nil
}
