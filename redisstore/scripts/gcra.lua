-- GCRA and TokenBucket: the twin of gcra.go. The state is one string, the
-- theoretical arrival time (TAT) in microseconds, which is also its expiry.
-- A rule is {alg, interval, capacity, span} with span = capacity * interval.

local function gcra_load(key)
  local v = redis.call('GET', key)
  return v and tonumber(v) or 0
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

local function gcra_refund(key, p, now, cost)
  local tat = gcra_load(key)
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
