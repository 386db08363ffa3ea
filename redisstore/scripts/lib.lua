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

-- Stored state is checked before a decision writes anything: a value that
-- floodgate would not have written (another program's key under the
-- prefix, a hand edit) fails that one decision with a description of the
-- problem, rather than the whole script (and with it every decision of
-- the batch) or a decision on a misread value. floodgate writes decimal
-- integers below 2^52 and instants no further ahead of Redis's clock than
-- two spans of their limit; SKEW allows a day more for a clock that
-- stepped back (a failover to a server whose clock is behind).

local MAX_INT = 4503599627370496 -- 2^52
local SKEW = 86400000000 -- one day in microseconds

-- uint parses s, a decimal integer of at most 2^52 as floodgate writes
-- them, or returns nil.
local function uint(s)
  if s and #s <= 16 and string.find(s, '^%d+$') then
    local n = tonumber(s)
    if n <= MAX_INT then
      return n
    end
  end
  return nil
end

-- too_far reports whether the instant t lies further ahead than a limit of
-- this span could have put it.
local function too_far(t, span)
  return t > now_us + 2 * span + SKEW
end

local function quote(v)
  if #v > 40 then
    return string.format('%q...', string.sub(v, 1, 40))
  end
  return string.format('%q', v)
end

local function bad_value(v, want)
  return 'holds ' .. quote(v) .. ', not ' .. want
end

local function bad_instant(v)
  return 'holds ' .. quote(v) .. ', an instant further ahead of redis\'s clock than the limit reaches'
end

local function wrong_type(key, want)
  return 'holds a ' .. redis.call('TYPE', key).ok .. ', not ' .. want
end

-- get returns key's string value, or false when key does not exist, or
-- nil and the problem when key holds another type.
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    return nil, wrong_type(key, 'a string')
  end
  return v
end
