-- The driver: parse the sets, then run the requests in arrival order.

local GCRA, FIXED, SLIDING, LOG, CALENDAR = 1, 2, 3, 4, 5

local sets = {}
local i = 3
for s = 1, tonumber(ARGV[2]) do
  local nrules = tonumber(ARGV[i])
  i = i + 1
  local rules = {}
  for r = 1, nrules do
    rules[r] = { tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]) }
    i = i + 4
    if rules[r][1] == CALENDAR then
      -- A fixed window of calendar days: two more bounds follow (see
      -- fixedwindow.lua). It is a fixed window in every other respect.
      rules[r][1], rules[r][5], rules[r][6] = FIXED, tonumber(ARGV[i]), tonumber(ARGV[i + 1])
      i = i + 2
    end
  end
  sets[s] = rules
end

-- Per-rule scratch of the request being decided: the loaded state (sa..se),
-- the decision (ok, rem, rst, rty) and the state to store (na..nc). Made on
-- first use: a batch of single-GCRA requests, the common case, needs none.
local sa, sb, sc, sd, se, ok, rem, rst, rty, na, nb, nc

local function scratch()
  if not sa then
    sa, sb, sc, sd, se, ok, rem, rst, rty, na, nb, nc = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
  end
end

-- load reads and checks the state of rule r; it returns the problem with
-- the stored state, or nil.
local function load(p, key, r)
  local alg, bad = p[1], nil
  if alg == GCRA then
    sa[r], bad = gcra_load(key, p)
  elseif alg == FIXED then
    sa[r], sb[r], bad = fixed_load(key, p)
  elseif alg == SLIDING then
    sa[r], sb[r], sc[r], bad = sliding_load(key, p)
  else
    sa[r], sb[r], sc[r], sd[r], se[r] = log_load(key, p, now_us)
    if sa[r] == nil then
      bad = sb[r]
    end
  end
  return bad
end

-- step decides rule r on its loaded state; ok[r] is nil, and rem[r] the
-- problem, when a sliding log turns out corrupt.
local function step(p, key, r, cost)
  local alg = p[1]
  if alg == GCRA then
    ok[r], rem[r], rst[r], rty[r], na[r] = gcra_step(p, sa[r], now_us, cost)
  elseif alg == FIXED then
    ok[r], rem[r], rst[r], rty[r], na[r], nb[r] = fixed_step(p, sa[r], sb[r], now_us, cost)
  elseif alg == SLIDING then
    ok[r], rem[r], rst[r], rty[r], na[r], nb[r], nc[r] = sliding_step(p, sa[r], sb[r], sc[r], now_us, cost)
  else
    ok[r], rem[r], rst[r], rty[r] = log_step(key, p, sa[r], sb[r], sc[r], sd[r], se[r], cost)
  end
end

local function charge(p, key, r, cost)
  local alg = p[1]
  if alg == GCRA then
    gcra_save(key, na[r])
  elseif alg == FIXED then
    fixed_save(key, na[r], nb[r])
  elseif alg == SLIDING then
    sliding_save(key, p, na[r], nb[r], nc[r])
  else
    log_charge(key, p, sa[r], sc[r], cost)
  end
end

local out, n = {}, 0

-- fail answers the request with the problem of rule r's stored state, as
-- "<r-1> <problem>", in place of its values.
local function fail(r, problem)
  out[n + 1] = int(r - 1) .. ' ' .. problem
  n = n + 1
end

-- decide checks every rule, then charges all of them or none. When one
-- denies, the rules that would have allowed report their uncharged state,
-- as a peek (cost 0) would. Every key is read and checked before the first
-- write, so a request that meets corrupt state writes nothing.
local function decide(rules, k, cost)
  scratch()
  for r = 1, #rules do
    local bad = load(rules[r], KEYS[k + r], r)
    if bad then
      fail(r, bad)
      return
    end
  end
  local all = true
  for r = 1, #rules do
    step(rules[r], KEYS[k + r], r, cost)
    if ok[r] == nil then
      fail(r, rem[r])
      return
    end
    if ok[r] == 0 then
      all = false
    end
  end
  for r = 1, #rules do
    if rules[r][1] == LOG then
      log_tidy(KEYS[k + r], rules[r], sa[r], se[r])
    end
  end
  if cost > 0 then
    for r = 1, #rules do
      if all then
        charge(rules[r], KEYS[k + r], r, cost)
      elseif ok[r] == 1 then
        step(rules[r], KEYS[k + r], r, 0)
      end
    end
  end
  for r = 1, #rules do
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = ok[r], rem[r], rst[r], rty[r]
    n = n + 4
  end
end

-- decide1 is decide for the most common set, one GCRA rule.
local function decide1(p, key, cost)
  local tat0, bad = gcra_load(key, p)
  if bad then
    fail(1, bad)
    return
  end
  local a, b, c, d, tat = gcra_step(p, tat0, now_us, cost)
  if tat then
    gcra_save(key, tat)
  end
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = a, b, c, d
  n = n + 4
end

-- decide1f is decide for a set of one fixed window, an Envoy descriptor's
-- limit: fixed_load, fixed_step and fixed_save without decide's scratch.
local function decide1f(p, key, cost)
  local e, c, bad = fixed_load(key, p)
  if bad then
    fail(1, bad)
    return
  end
  local a, b, d, f, ne, nc = fixed_step(p, e, c, now_us, cost)
  if ne then
    fixed_save(key, ne, nc)
  end
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = a, b, d, f
  n = n + 4
end

-- refund reads and checks every rule's state, then takes cost back from
-- each; it answers 0, or the problem of the first corrupt rule, having
-- written nothing. While a GCRA rule's TAT lies more than its span ahead
-- of now it carries a reservation not yet due, which was timed behind the
-- units a refund would give back: it then writes nothing (algo's
-- Reserved).
local function refund(rules, k, cost)
  scratch()
  for r = 1, #rules do
    local p, key = rules[r], KEYS[k + r]
    local bad
    if p[1] == LOG then
      sa[r], sb[r], sc[r], sd[r], se[r], na[r] = log_refund_plan(key, p, now_us, cost)
      if sa[r] == nil then
        bad = sb[r]
      end
    else
      bad = load(p, key, r)
    end
    if bad then
      fail(r, bad)
      return
    end
  end
  for r = 1, #rules do
    local p = rules[r]
    if p[1] == GCRA and sa[r] - p[4] > now_us then
      out[n + 1] = 0
      n = n + 1
      return
    end
  end
  for r = 1, #rules do
    local p, key = rules[r], KEYS[k + r]
    local alg = p[1]
    if alg == GCRA then
      gcra_refund(key, p, sa[r], now_us, cost)
    elseif alg == FIXED then
      fixed_refund(key, sa[r], sb[r], now_us, cost)
    elseif alg == SLIDING then
      sliding_refund(key, p, sa[r], sb[r], sc[r], now_us, cost)
    else
      log_refund(key, p, now_us, sa[r], sb[r], sc[r], sd[r], se[r], na[r])
    end
  end
  out[n + 1] = 0
  n = n + 1
end

local k = 0 -- KEYS[k + r] is the key of rule r of the current request
local argc = #ARGV
while i <= argc do
  local op, rules, cost = tonumber(ARGV[i]), sets[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  i = i + 3
  if op == 0 then
    if #rules ~= 1 then
      decide(rules, k, cost)
    elseif rules[1][1] == GCRA then
      decide1(rules[1], KEYS[k + 1], cost)
    elseif rules[1][1] == FIXED then
      decide1f(rules[1], KEYS[k + 1], cost)
    else
      decide(rules, k, cost)
    end
  elseif op == 1 then
    refund(rules, k, cost)
  else
    redis.call('DEL', unpack(KEYS, k + 1, k + #rules))
    out[n + 1] = 0
    n = n + 1
  end
  k = k + #rules
end
return out
