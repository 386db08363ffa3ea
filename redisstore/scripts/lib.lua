-- Integer arithmetic on Lua numbers. Redis's Lua numbers are IEEE doubles:
-- they hold integers exactly below 2^53, and every limit the Go side accepts
-- keeps every value computed here below that. A quotient, though, is rounded
-- as a double, so floor(a/b) is taken through idiv, never math.floor alone.
-- Time is integer microseconds.

-- idiv returns floor(a / b) for b > 0, exactly: the rounded quotient may sit
-- on the wrong side of an integer, and the remainder tells which.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- imod returns a mod b for b > 0, in [0, b), also for negative a.
local function imod(a, b)
  return a - idiv(a, b) * b
end

-- int formats an integer for a command argument or a stored value. Lua's own
-- conversion keeps 14 significant digits, and Redis 7.2+ may pass a number
-- in exponent notation, which integer arguments such as PX reject.
local function int(x)
  return string.format('%d', x)
end

-- setx sets key to the string v until the instant at, when it stops
-- carrying information: PX in whole milliseconds from now, rounded up, so
-- that Redis never drops state that still counts.
local function setx(key, v, at)
  if pinned then
    redis.call('SET', key, v)
    return
  end
  redis.call('SET', key, v, 'PX', int(idiv(at - now_us + 999, 1000)))
end

-- expire is setx's expiry for a key that already holds its value.
local function expire(key, at)
  if not pinned then
    redis.call('PEXPIRE', key, int(idiv(at - now_us + 999, 1000)))
  end
end
