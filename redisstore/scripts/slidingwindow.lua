-- SlidingWindow: the twin of slidingwindow.go. The state is the string
-- "<expiry> <prev> <cur>": the expiry in microseconds (two periods after the
-- start of the current counter's window while it counts anything, one
-- period after while only the previous one does) and the two counts. A rule
-- is {alg, 0, capacity, period}. Every product below is at most
-- (capacity+2) * period, which the Go side keeps below 2^53.

-- sliding_load returns the expiry and counts under key (0, 0, 0 when
-- there are none), or nil, nil, nil and the problem with the stored value.
-- Counts are bounded so that count * period stays exact.
local function sliding_load(key, p)
  local v, bad = get(key)
  if not v then
    if bad then
      return nil, nil, nil, bad
    end
    return 0, 0, 0
  end
  local a, prev, cur = string.match(v, '^(%d+) (%d+) (%d+)$')
  a, prev, cur = uint(a), uint(prev), uint(cur)
  if not a or not prev or not cur or prev > MAX_INT / p[4] or cur > MAX_INT / p[4] then
    return nil, nil, nil, bad_value(v, 'a sliding window ("<expiry> <previous> <current>" in decimal integers)')
  end
  if too_far(a, p[4]) then
    return nil, nil, nil, bad_instant(v)
  end
  return a, prev, cur
end

-- sliding_counts returns the window holding now and its two counters,
-- rolled forward from the state (a, prev, cur). When the clock stepped back
-- behind the state, it decides at the start of the state's window instead.
local function sliding_counts(p, a, prev, cur, now)
  local span = p[4]
  local ws = now - imod(now, span)
  if a <= now then
    return ws, 0, 0, now
  end
  local sws = a - span
  if cur > 0 then
    sws = sws - span
  end
  if sws == ws then
    return ws, prev, cur, now
  elseif sws == ws - span then
    return ws, cur, 0, now
  elseif sws > ws then
    return sws, prev, cur, sws
  end
  return ws, 0, 0, now
end

-- sliding_expiry is the expiry of the state of window ws, or 0 when the
-- state is empty.
local function sliding_expiry(p, ws, prev, cur)
  if cur > 0 then
    return ws + 2 * p[4]
  elseif prev > 0 then
    return ws + p[4]
  end
  return 0
end

local function sliding_reset(p, ws, prev, cur, now)
  local a = sliding_expiry(p, ws, prev, cur)
  if a > now then
    return a - now
  end
  return 0
end

-- sliding_retry is the time from elapsed (into the current window) until a
-- request of cost passes, assuming nothing else does; see slidingRetry in
-- slidingwindow.go for the derivation.
local function sliding_retry(p, prev, cur, cost, elapsed)
  local span, q = p[4], p[3]
  if cur + cost <= q then
    if prev == 0 then
      return 0
    end
    local w = span - idiv((q - cur - cost) * span, prev) - elapsed
    if w < 0 then
      w = 0
    end
    return w
  end
  local nxt = 0
  if cur > 0 then
    nxt = span - idiv((q - cost) * span, cur)
    if nxt < 0 then
      nxt = 0
    end
  end
  return span - elapsed + nxt
end

-- sliding_step returns allowed, remaining, reset, retry and, when allowed
-- with a cost, the window start and the counts to store.
local function sliding_step(p, a, sprev, scur, now, cost)
  local ws, prev, cur, at = sliding_counts(p, a, sprev, scur, now)
  local span, cap = p[4], p[3]
  local elapsed = at - ws
  -- ceil(prev * (span - elapsed) / span)
  local used = idiv(prev * (span - elapsed) + span - 1, span) + cur
  local rem = cap - used
  if rem < 0 then
    rem = 0
  end
  if cost == 0 then
    return 1, rem, sliding_reset(p, ws, prev, cur, at), 0
  end
  if used + cost > cap then
    return 0, rem, sliding_reset(p, ws, prev, cur, at), sliding_retry(p, prev, cur, cost, elapsed)
  end
  cur = cur + cost
  return 1, cap - used - cost, sliding_reset(p, ws, prev, cur, at), 0, ws, prev, cur
end

local function sliding_save(key, p, ws, prev, cur)
  local a = sliding_expiry(p, ws, prev, cur)
  if a == 0 then
    redis.call('DEL', key)
    return
  end
  setx(key, int(a) .. ' ' .. int(prev) .. ' ' .. int(cur), a)
end

-- sliding_refund takes cost units back from the state that sliding_load
-- read.
local function sliding_refund(key, p, a, prev, cur, now, cost)
  if a == 0 then
    return
  end
  local ws
  ws, prev, cur = sliding_counts(p, a, prev, cur, now)
  cur = cur - cost
  if cur < 0 then
    cur = 0
  end
  sliding_save(key, p, ws, prev, cur)
end
