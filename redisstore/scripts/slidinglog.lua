-- SlidingLog: the twin of slidinglog.go. The state is a sorted set with one
-- member per admission: the score is the admission's instant in
-- microseconds, the member "<cum>:<n>" holds its units n and cum, the units
-- admitted to this log up to and including it (zero-padded so that
-- admissions of one instant sort in order). The units in the log are then
-- cum(newest) - cum(oldest) + n(oldest), read from its two ends. Admissions
-- never exceed the rate per period, so the set holds at most Rate members.
-- A rule is {alg, 0, capacity, period}.
--
-- Reads come first and check every member and score they use; admissions
-- that no longer count are dropped only afterwards (log_tidy), so that a
-- decision that meets a corrupt log has written nothing.

local function log_member(cum, n)
  return string.format('%016d:%d', cum, n)
end

-- log_parse returns the cum and units of member m, or nil when m is not an
-- admission floodgate wrote.
local function log_parse(m)
  local cum, n = string.match(m, '^(%d+):(%d+)$')
  cum, n = uint(cum), uint(n)
  if cum and n and n >= 1 and n <= cum then
    return cum, n
  end
  return nil
end

-- log_at returns the instant of score s, or nil when it is not a whole
-- microsecond within the limit's reach.
local function log_at(s, span)
  local t = tonumber(s)
  if t and t >= 0 and t == math.floor(t) and not too_far(t, span) then
    return t
  end
  return nil
end

local function log_bad(m, s)
  return 'holds the member ' .. quote(m) .. ' at score ' .. quote(s) ..
    ', not an admission ("<cum>:<units>" at a whole microsecond within the limit\'s reach)'
end

-- log_entry reads the admission of rank i: its instant, cum and units, or
-- nil and the problem.
local function log_entry(key, i, span)
  local e = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  if #e == 0 then
    return nil, 'holds fewer admissions than its newest one counts'
  end
  local cum, n = log_parse(e[1])
  local t = log_at(e[2], span)
  if not cum or not t then
    return nil, log_bad(e[1], e[2])
  end
  return t, cum, n
end

-- log_load reads the log's summary: the instant to decide at (now, or the
-- newest admission if the clock stepped back behind it), the units that
-- count, the cum of its newest admission and that admission's instant (0
-- for an empty log), and how many admissions at its start no longer count
-- (-1: all of them). Or nil and the problem with the log.
local function log_load(key, p, now)
  local newest = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest.err then
    return nil, wrong_type(key, 'a sorted set')
  end
  if #newest == 0 then
    return now, 0, 0, 0, 0
  end
  local cumn = log_parse(newest[1])
  local nat = log_at(newest[2], p[4])
  if not cumn or not nat then
    return nil, log_bad(newest[1], newest[2])
  end
  if nat > now then
    now = nat
  end
  -- an admission at t counts during [t, t+period)
  if nat + p[4] <= now then
    return now, 0, 0, 0, -1
  end
  local stale = redis.call('ZCOUNT', key, '-inf', int(now - p[4]))
  local _, cumo, no = log_entry(key, stale, p[4])
  if not _ then
    return nil, cumo
  end
  if cumo > cumn then
    return nil, log_bad(newest[1], newest[2])
  end
  return now, cumn - cumo + no, cumn, nat, stale
end

-- log_tidy drops the admissions that log_load found no longer count.
local function log_tidy(key, p, at, stale)
  if stale < 0 then
    redis.call('DEL', key)
  elseif stale > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(at - p[4]))
  end
end

-- log_find returns the rank, instant, cum and units of the oldest
-- admission, from rank lo on, whose cum reaches target: ranks follow
-- instants, and cum grows with them. Or nil and the problem.
local function log_find(key, lo, target, span)
  local t, cum, n = log_entry(key, lo, span)
  if not t then
    return nil, cum
  end
  if cum >= target then
    return lo, t, cum, n
  end
  local hi = redis.call('ZCARD', key) - 1
  lo = math.min(lo + 1, hi)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2) -- exact: a sum of two small integers, halved
    local m = redis.call('ZRANGE', key, mid, mid, 'WITHSCORES')
    local c = log_parse(m[1])
    if not c then
      return nil, log_bad(m[1], m[2])
    end
    if c >= target then
      hi = mid
    else
      lo = mid + 1
    end
  end
  t, cum, n = log_entry(key, lo, span)
  if not t then
    return nil, cum
  end
  return lo, t, cum, n
end

-- log_step returns allowed, remaining, reset and retry for the log summary
-- (at, used, cumn, nat, stale) that log_load returned, or nil and the
-- problem with the log.
local function log_step(key, p, at, used, cumn, nat, stale, cost)
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
  local rank, t = log_find(key, math.max(stale, 0), cumn - used + need, span)
  if not rank then
    return nil, t
  end
  return 0, rem, reset, t + span - at
end

local function log_charge(key, p, at, cumn, cost)
  redis.call('ZADD', key, int(at), log_member(cumn + cost, cost))
  expire(key, at + p[4])
end

-- log_refund_plan reads what a refund of cost at now changes: the
-- admissions that no longer count at now, and the newest ones that the
-- refund takes back. It returns stale (as log_load), the rank from which
-- admissions go, the instant, cum and units of the admission at that rank
-- to put back with fewer units (units 0: none), and the instant of the
-- newest admission left (0: none). Or nil and the problem.
local function log_refund_plan(key, p, now, cost)
  local newest = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest.err then
    return nil, wrong_type(key, 'a sorted set')
  end
  if #newest == 0 then
    return 0, -1, 0, 0, 0, 0
  end
  local cumn, nn = log_parse(newest[1])
  local nat = log_at(newest[2], p[4])
  if not cumn or not nat then
    return nil, log_bad(newest[1], newest[2])
  end
  local stale = redis.call('ZCOUNT', key, '-inf', int(now - p[4]))
  local card = redis.call('ZCARD', key)
  if stale == card then
    return -1, -1, 0, 0, 0, 0
  end
  local rank, t, cum, n = card - 1, nat, cumn, nn
  if cost > nn then
    -- the refund reaches past the newest admission
    rank, t, cum, n = log_find(key, stale, cumn - cost + 1, p[4])
    if not rank then
      return nil, t
    end
  end
  -- units of that admission the refund leaves
  local keep = n - (cum - (cumn - cost))
  if keep < 0 then
    keep = 0 -- the refund takes back every unit that counts
  end
  if keep > 0 then
    return stale, rank, t, cumn - cost, keep, t
  end
  if rank > stale then
    -- the expiry follows the newest admission left; only its instant counts
    local e = redis.call('ZRANGE', key, rank - 1, rank - 1, 'WITHSCORES')
    local before = log_at(e[2], p[4])
    if not before then
      return nil, log_bad(e[1], e[2])
    end
    return stale, rank, 0, 0, 0, before
  end
  return stale, rank, 0, 0, 0, 0
end

-- log_refund applies the plan log_refund_plan made.
local function log_refund(key, p, now, stale, rank, t, cum, keep, last)
  if rank >= 0 then
    redis.call('ZREMRANGEBYRANK', key, rank, -1)
  end
  if stale ~= 0 then
    log_tidy(key, p, now, stale)
  end
  if keep > 0 then
    redis.call('ZADD', key, int(t), log_member(cum, keep))
  end
  if last > 0 then
    expire(key, last + p[4])
  end
end
