-- The holders of one key of a concurrency limit: a sorted set whose members
-- are the holders' tokens, scored by the Redis time (milliseconds) at which
-- each lease runs out. Every instance reads the one clock of Redis, so the
-- instances never disagree on which lease has expired.
--
-- KEYS[1]  the sorted set
-- ARGV[1]  op: "acquire", "renew", "release" or "count"
-- ARGV[2]  token
-- ARGV[3]  lease in milliseconds (acquire, renew)
-- ARGV[4]  limit (acquire)
--
-- acquire returns {1 if held, holders}; renew {1 if still held, holders};
-- release {0, holders}; count {0, holders}.

local key, op, token = KEYS[1], ARGV[1], ARGV[2]
local kind = redis.call('TYPE', key).ok
if kind ~= 'none' and kind ~= 'zset' then
	return redis.error_reply('FLOODGATE_CORRUPT key holds a ' .. kind .. ', not the sorted set of a concurrency limit')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

-- extend keeps the key alive as long as its longest lease, so that a key
-- whose holders all died disappears with their last lease.
local function extend()
	local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
	if top[2] then
		redis.call('PEXPIREAT', key, tonumber(top[2]))
	end
end

if op == 'acquire' then
	local lease, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
	local held = redis.call('ZSCORE', key, token)
	local n = redis.call('ZCARD', key)
	if not held and n >= limit then
		return {0, n}
	end
	redis.call('ZADD', key, now + lease, token)
	extend()
	if held then
		return {1, n}
	end
	return {1, n + 1}
elseif op == 'renew' then
	if not redis.call('ZSCORE', key, token) then
		return {0, redis.call('ZCARD', key)}
	end
	redis.call('ZADD', key, 'XX', now + tonumber(ARGV[3]), token)
	extend()
	return {1, redis.call('ZCARD', key)}
elseif op == 'release' then
	redis.call('ZREM', key, token)
	return {0, redis.call('ZCARD', key)}
end
return {0, redis.call('ZCARD', key)}
