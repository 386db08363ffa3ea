package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/algo"
)

// Plain counting: a decision marked by package internal/chargedenied (the
// Envoy service's independent descriptors with charge_denied, counting as
// envoyproxy/ratelimit does) on a set of one fixed window adds its cost to
// the window's count whether or not it is admitted. That needs no script:
// INCRBY adds, and the count it returns decides (admitted while it stays
// within the capacity); PEXPIRE NX gives a new key the time left in the
// window, so the key is gone, and the count back to zero, when the window
// ends. Both go in the batch's pipeline, beside any script calls, and
// neither is resent after a failure. The key is the limit's key with the
// tag c and the window's end in microseconds (see Key): a plain integer,
// distinct from the script's "<end> <count>" under tag f, so the two ways
// of counting never read each other's state, and each window's count its
// own, whatever the expiry's rounding. The window is the one that holds
// this process's clock (or Options.Clock), as envoyproxy/ratelimit takes
// its own.

// plainSet reports whether set's decisions may be counted plainly: one
// fixed window.
func plainSet(set *algo.Set) bool {
	return set.Len() == 1 && set.At(0).Kind() == algo.FixedWindow
}

// plainKey appends the key of set's plain count for key in the window
// that ends at endNs to b.
func plainKey(b []byte, prefix string, set *algo.Set, key string, endNs int64) []byte {
	b = appendKey(b, prefix, set, key, 0)
	b[len(b)-1] = 'c'
	b = append(b, ':')
	return strconv.AppendInt(b, endNs/1e3, 10)
}

// plainNow is the instant plain counting takes its window from.
func (s *Store) plainNow() int64 {
	if s.clock != nil {
		return s.clock.UnixNano()
	}
	return time.Now().UnixNano()
}

// plainCall builds r's commands, for the window that holds atNs.
func (f *flusher) plainCall(ctx context.Context, r *request, atNs int64) plainCall {
	_, end := r.set.At(0).Window(atNs)
	k := string(plainKey(f.buf[:0], f.s.prefix, r.set, r.key, end))
	ttl := (end - atNs + int64(time.Millisecond) - 1) / int64(time.Millisecond) // rounded up: never before the window ends
	return plainCall{
		r:      r,
		incr:   redis.NewCmd(ctx, "incrby", k, r.cost),
		expire: redis.NewCmd(ctx, "pexpire", k, max(ttl, 1), "nx"),
		now:    atNs,
		end:    end,
	}
}

// completePlain decodes c's replies into its request and hands it back.
// A PEXPIRE that failed on a new key (a server before Redis 7, which knows
// no NX) is sent again without NX, so that no count outlives its window.
func (s *Store) completePlain(ctx context.Context, c *plainCall) {
	r := c.r
	n, err := c.incr.Int64()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") || redis.HasErrorPrefix(err, "ERR value is not an integer") {
			// INCRBY changed nothing; PEXPIRE NX gave the key an expiry
			// if it had none, which PERSIST takes back.
			if set, _ := c.expire.Int64(); set == 1 {
				_ = s.client.Persist(ctx, c.incr.Args()[1].(string)).Err()
			}
			err = &CorruptStateError{
				Key:      c.incr.Args()[1].(string),
				Problem:  "holds something other than a count (an integer string)",
				redacted: string(plainKey(nil, s.prefix, r.set, "…", c.end)),
			}
		}
		r.finish(err)
		return
	}
	if c.expire.Err() != nil && n == r.cost {
		ttl := c.expire.Args()[2]
		_ = s.client.Process(ctx, redis.NewCmd(ctx, "pexpire", c.incr.Args()[1], ttl))
	}
	capacity := r.set.At(0).Capacity()
	left := time.Duration(c.end - c.now)
	d := algo.Decision{Allowed: n <= capacity || r.cost == 0, Remaining: max(capacity-n, 0)}
	if n > 0 {
		d.ResetAfter = left
	}
	if !d.Allowed {
		d.RetryAfter = left
	}
	r.ds[0] = d
	r.finish(nil)
}

// plainRefundSrc takes units back from a plain count, never below zero, and
// never creates one. Refunds are rare (Envoy's negative hits): one small
// script, outside the batches.
const plainRefundSrc = `local n = redis.call('GET', KEYS[1])
if not n then return 0 end
n = tonumber(n)
if not n then return redis.error_reply('WRONGTYPE count') end
local left = n - tonumber(ARGV[1])
if left <= 0 then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], left, 'KEEPTTL') end
return 0`

// plainRefund refunds cost units of a plain count.
func (s *Store) plainRefund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	if _, ok := ctx.Deadline(); !ok && s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	_, end := set.At(0).Window(s.plainNow())
	cmd := redis.NewCmd(ctx, "eval", plainRefundSrc, 1, string(plainKey(nil, s.prefix, set, key, end)), cost)
	_ = s.client.Process(ctx, scriptCmd{cmd})
	if err := cmd.Err(); err != nil {
		return &Error{Op: opNames[opRefund], Err: err}
	}
	return nil
}

// plainReset deletes key's plain count in the current window (and the
// previous one, for a clock a moment behind another instance's): the
// windows a decision can still count in.
func (s *Store) plainReset(ctx context.Context, set *algo.Set, key string) error {
	start, end := set.At(0).Window(s.plainNow())
	_, prevEnd := set.At(0).Window(start - 1)
	return s.client.Del(ctx, string(plainKey(nil, s.prefix, set, key, end)), string(plainKey(nil, s.prefix, set, key, prevEnd))).Err()
}
