-- floodgate's Redis engine: one call decides a batch of requests, each
-- atomically and all-or-nothing over the limits of its policy.
--
-- KEYS: the keys of every request in order, one per limit of its set.
-- ARGV: now | nsets | sets... | requests...
--   now      "" to read Redis's clock (TIME), or a time in microseconds
--            when a test pins the clock
--   set      nrules, then per rule: alg, a, capacity, span
--   request  op (0 decide, 1 refund, 2 reset), set index (from 1), cost
-- Reply, for each request in order:
--   decide   per rule of its set: allowed (1 or 0), remaining, reset and
--            retry (microseconds)
--   refund   0
--   reset    0
-- except that a decide or refund that meets state floodgate did not write
-- (another type, a value that does not parse, an instant out of reach)
-- answers one string instead, "<rule index from 0> <problem>", having
-- written nothing. Such a key fails only its own requests.

-- Scripts that read TIME and then write are replicated by their effects; on
-- Redis 7 that is the only mode and this call does nothing.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- A pinned time (tests only) is not Redis's clock, which expires keys: a
-- TTL would drop state early or keep it late, so pinned keys get none.
local now_us, pinned
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now_us, pinned = tonumber(ARGV[1]), true
end
