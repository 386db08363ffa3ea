-- FixedWindow: the twin of fixedwindow.go. The state is the string
-- "<end> <count>": the end of the window the count belongs to (its expiry,
-- in microseconds) and the units counted in it. A rule is
-- {alg, offset, capacity, period}; offset is the zone offset in
-- microseconds that aligns windows to a location's wall clock (0 for UTC).
--
-- Windows of whole calendar days in a zone run from local midnight to local
-- midnight, 23 or 25 hours across a daylight-saving change; Lua has no zone
-- database, so Go sends the days themselves: the rule is
-- {alg, start, capacity, end, previous start, next end}, the window that
-- held Go's clock and its neighbours. Redis's clock picks one of the three,
-- so the two clocks may disagree by up to a day.

-- fixed_window returns the window [start, end) that holds now.
local function fixed_window(p, now)
  if p[5] then
    if now < p[2] then
      return p[5], p[2]
    elseif now >= p[4] then
      return p[4], p[6]
    end
    return p[2], p[4]
  end
  local t = now + p[2]
  local ws = t - imod(t, p[4]) - p[2]
  return ws, ws + p[4]
end

-- fixed_start returns the start of the window that ends at e.
local function fixed_start(p, e)
  if p[5] then
    if e == p[2] then
      return p[5]
    elseif e == p[6] then
      return p[4]
    elseif e == p[4] then
      return p[2]
    end
    return e - (p[4] - p[2])
  end
  return e - p[4]
end

-- fixed_span is the longest a window lasts.
local function fixed_span(p)
  if p[5] then
    return math.max(p[2] - p[5], p[4] - p[2], p[6] - p[4])
  end
  return p[4]
end

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
  if too_far(e, fixed_span(p)) then
    return nil, nil, bad_instant(v)
  end
  return e, c
end

-- fixed_step returns allowed, remaining, reset, retry and, when allowed with
-- a cost, the window end and count to store.
local function fixed_step(p, e, c, now, cost)
  local cap = p[3]
  if e <= now then
    local _, we = fixed_window(p, now)
    e, c = we, 0
  else
    local ws = fixed_start(p, e)
    if ws > now then
      now = ws -- the clock stepped back: never decide before the window began
    end
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
