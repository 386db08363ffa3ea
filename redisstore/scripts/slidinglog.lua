-- SlidingLog: the twin of slidinglog.go. The state is a sorted set with one
-- member per admission: the score is the admission's instant in
-- microseconds, the member "<cum>:<n>" holds its units n and cum, the units
-- admitted to this log up to and including it (zero-padded so that
-- admissions of one instant sort in order). The units in the log are then
-- cum(newest) - cum(oldest) + n(oldest), read from its two ends. Admissions
-- never exceed the rate per period, so the set holds at most Rate members.
-- A rule is {alg, 0, capacity, period}.

local function log_member(cum, n)
  return string.format('%016d:%d', cum, n)
end

local function log_parse(m)
  local cum, n = string.match(m, '^(%d+):(%d+)$')
  return tonumber(cum), tonumber(n)
end

-- log_load drops the admissions that no longer count and returns the log's
-- summary: the instant to decide at (now, or the newest admission if the
-- clock stepped back behind it), the units in the log, the cum of its newest
-- admission and that admission's instant (0 for an empty log).
local function log_load(key, p, now)
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #newest == 0 then
    return now, 0, 0, 0
  end
  local nat = tonumber(newest[2])
  if nat > now then
    now = nat
  end
  -- an admission at t counts during [t, t+period)
  if nat + p[4] <= now then
    redis.call('DEL', key)
    return now, 0, 0, 0
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - p[4]))
  local cumn = log_parse(newest[1])
  local oldest = redis.call('ZRANGE', key, 0, 0)
  local cumo, no = log_parse(oldest[1])
  return now, cumn - cumo + no, cumn, nat
end

-- log_find returns the instant of the oldest admission whose cum reaches
-- target: ranks follow instants, and cum grows with them.
local function log_find(key, target)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if log_parse(first[1]) >= target then
    return tonumber(first[2])
  end
  local lo, hi = 1, redis.call('ZCARD', key) - 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2) -- exact: a sum of two small integers, halved
    local m = redis.call('ZRANGE', key, mid, mid)
    if log_parse(m[1]) >= target then
      hi = mid
    else
      lo = mid + 1
    end
  end
  local m = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
  return tonumber(m[2])
end

-- log_step returns allowed, remaining, reset and retry for the log summary
-- (at, used, cumn, nat) that log_load returned.
local function log_step(key, p, at, used, cumn, nat, cost)
  local cap, span = p[3], p[4]
  if cost > 0 and used + cost <= cap then
    return 1, cap - used - cost, span, 0
  end
  local rem = cap - used
  if rem < 0 then
    rem = 0
  end
  local reset = 0
  if used > 0 then
    reset = nat + span - at
  end
  if cost == 0 then
    return 1, rem, reset, 0
  end
  -- wait until enough of the oldest admissions expire: the unit whose cum is
  -- (cumn - used) + need must go
  local need = used + cost - cap
  local t = log_find(key, cumn - used + need)
  return 0, rem, reset, t + span - at
end

local function log_charge(key, p, at, cumn, cost)
  redis.call('ZADD', key, int(at), log_member(cumn + cost, cost))
  expire(key, at + p[4])
end

local function log_refund(key, p, now, cost)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - p[4]))
  while cost > 0 do
    local m = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #m == 0 then
      return
    end
    local cum, n = log_parse(m[1])
    redis.call('ZREM', key, m[1])
    if n > cost then
      redis.call('ZADD', key, m[2], log_member(cum - cost, n - cost))
      cost = 0
    else
      cost = cost - n
    end
  end
  local m = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #m > 0 then
    expire(key, tonumber(m[2]) + p[4])
  end
end
