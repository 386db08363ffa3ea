-- Reservations: the twin of algo/reserve.go, a script of its own (prologue,
-- lib and gcra come first). One call reserves for, or cancels, one request
-- under every limit of its set, which is all GCRA.
--
-- KEYS: the key of every rule of the set.
-- ARGV: now | op (1 reserve, 2 cancel) | cost | w | deadline | nrules | per
--       rule: interval, capacity, span | cancel: per rule, the TAT the
--       reservation left and the one it found
--   w        reserve: the longest wait (µs); cancel: the instant the units
--            were due (µs)
--   deadline reserve: the instant (µs) the caller's context ends, from
--            which nothing is charged: the caller has given up; 0 for none
-- Reply: reserve: now, allowed (1 or 0), then per rule: remaining, reset,
--        retry (the wait), the TAT stored and the TAT found (both 0 when
--        denied); or now, 2 when run at or after deadline, having charged
--        nothing;
--        cancel: 0;
-- or, for a key holding state floodgate did not write, the string
-- "<rule index from 0> <problem>", having written nothing.

local op, cost, w, deadline, nrules = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local rules, tats = {}, {}
local j = 7
for r = 1, nrules do
  rules[r] = { 1, tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]) }
  j = j + 3
end
for r = 1, nrules do
  local tat, bad = gcra_load(KEYS[r], rules[r])
  if bad then
    return int(r - 1) .. ' ' .. bad
  end
  tats[r] = tat
end

if op == 2 then
  -- algo.Transition.Unreserve on every rule.
  if now_us >= w or cost <= 0 then
    return 0
  end
  for r = 1, nrules do
    local nx, pv = tonumber(ARGV[j + 2 * r - 2]), tonumber(ARGV[j + 2 * r - 1])
    -- Only a TAT still at what the reservation left goes back, to what it
    -- found (as if it had not been made); a TAT that moved on carries
    -- later charges that rely on these units, and is kept.
    if tats[r] == nx then
      if pv <= now_us then
        redis.call('DEL', KEYS[r])
      else
        gcra_save(KEYS[r], pv)
      end
    end
  end
  return 0
end

if deadline > 0 and now_us >= deadline then
  return { now_us, 2 }
end

-- algo.Set.Reserve: the wait is the longest of the rules'.
local waits, wait = {}, 0
for r = 1, nrules do
  local p = rules[r]
  local tat = tats[r]
  if tat < now_us then
    tat = now_us
  end
  local wr = tat + cost * p[2] - now_us - p[4]
  if wr < 0 then
    wr = 0
  end
  waits[r] = wr
  if wr > wait then
    wait = wr
  end
end
local out = { now_us, 1 }
if wait > w then
  out[2] = 0
  for r = 1, nrules do
    local p = rules[r]
    local tat = tats[r]
    if tat < now_us then
      tat = now_us
    end
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4], out[#out + 5] = gcra_remaining(p, tat, now_us), tat - now_us, waits[r], 0, 0
  end
  return out
end
local at = now_us + wait
for r = 1, nrules do
  local p = rules[r]
  local base = tats[r]
  if base < at then
    base = at
  end
  local nxt = base + cost * p[2]
  if cost > 0 then
    gcra_save(KEYS[r], nxt)
  end
  out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4], out[#out + 5] = gcra_remaining(p, nxt, at), nxt - now_us, wait, nxt, tats[r]
end
return out
