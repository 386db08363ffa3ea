-- GCRA and TokenBucket: the twin of gcra.go. The state is one string, the
-- theoretical arrival time (TAT) in microseconds, which is also its expiry.
-- A rule is {alg, interval, capacity, span} with span = capacity * interval.

-- gcra_load returns the TAT under key (0 when there is none), or nil and
-- the problem with the stored value.
local function gcra_load(key, p)
  local v, bad = get(key)
  if not v then
    if bad then
      return nil, bad
    end
    return 0
  end
  local tat = uint(v)
  if not tat then
    return nil, bad_value(v, 'a TAT (a decimal integer of microseconds)')
  end
  if too_far(tat, p[4]) then
    return nil, bad_instant(v)
  end
  return tat
end

local function gcra_remaining(p, tat, now)
  local free = p[4] - (tat - now)
  if free <= 0 then
    return 0
  end
  return idiv(free, p[2])
end

-- gcra_step returns allowed (1 or 0), remaining, reset, retry and, when
-- allowed with a cost, the TAT to store.
local function gcra_step(p, tat0, now, cost)
  local tat = tat0
  if tat < now then
    tat = now
  end
  if cost == 0 then
    return 1, gcra_remaining(p, tat, now), tat - now, 0
  end
  local nxt = tat + cost * p[2]
  local over = nxt - now - p[4]
  if over > 0 then
    -- at now+over, nxt-now equals the span exactly
    return 0, gcra_remaining(p, tat, now), tat - now, over
  end
  return 1, gcra_remaining(p, nxt, now), nxt - now, 0, nxt
end

local function gcra_save(key, tat)
  setx(key, int(tat), tat)
end

-- gcra_refund takes cost units back from the TAT that gcra_load read.
local function gcra_refund(key, p, tat, now, cost)
  if tat == 0 then
    return
  end
  tat = tat - cost * p[2]
  if tat <= now then
    redis.call('DEL', key)
  else
    gcra_save(key, tat)
  end
end
