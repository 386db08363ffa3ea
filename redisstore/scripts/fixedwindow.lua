-- FixedWindow: the twin of fixedwindow.go. The state is the string
-- "<end> <count>": the end of the window the count belongs to (its expiry,
-- in microseconds) and the units counted in it. A rule is
-- {alg, offset, capacity, period}; offset is the zone offset in
-- microseconds that aligns windows to a location's wall clock (0 for UTC).

-- fixed_load returns the window end and count under key (0, 0 when there
-- are none), or nil, nil and the problem with the stored value.
local function fixed_load(key, p)
  local v, bad = get(key)
  if not v then
    if bad then
      return nil, nil, bad
    end
    return 0, 0
  end
  local e, c = string.match(v, '^(%d+) (%d+)$')
  e, c = uint(e), uint(c)
  if not e or not c then
    return nil, nil, bad_value(v, 'a window ("<end> <count>" in decimal integers)')
  end
  if too_far(e, p[4]) then
    return nil, nil, bad_instant(v)
  end
  return e, c
end

-- fixed_step returns allowed, remaining, reset, retry and, when allowed with
-- a cost, the window end and count to store.
local function fixed_step(p, e, c, now, cost)
  local cap, span = p[3], p[4]
  if e <= now then
    local t = now + p[2]
    e, c = t - imod(t, span) - p[2] + span, 0
  elseif e - span > now then
    now = e - span -- the clock stepped back: never decide before the window began
  end
  local reset = 0
  if c > 0 then
    reset = e - now
  end
  local rem = cap - c
  if rem < 0 then
    rem = 0
  end
  if cost == 0 then
    return 1, rem, reset, 0
  end
  if c + cost > cap then
    return 0, rem, reset, e - now
  end
  return 1, cap - c - cost, e - now, 0, e, c + cost
end

local function fixed_save(key, e, c)
  setx(key, int(e) .. ' ' .. int(c), e)
end

-- fixed_refund takes cost units back from the window that fixed_load read.
local function fixed_refund(key, e, c, now, cost)
  if e == 0 then
    return
  end
  if e <= now or c <= cost then
    redis.call('DEL', key)
  else
    fixed_save(key, e, c - cost)
  end
end
