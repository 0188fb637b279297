-- rate_limit.lua: GCRA (generic cell rate algorithm) on the Redis clock.
--
-- KEYS[1]  the bucket, e.g. <prefix>rate:{user:<user_id>}: the theoretical
--          arrival time in µs; it expires once the bucket is full again
-- ARGV[1]  emission interval in µs (1 000 000 / rate per second)
-- ARGV[2]  burst: how many requests may arrive at once
--
-- Returns {code, field, value, ...}, by code:
--   allowed  admitted and counted: remaining (requests that would be
--            admitted right after this one), reset_ms (when the bucket is
--            full again)
--   refused  retry_after_ms (when it may be admitted), reset_ms
-- One clock (Redis TIME) and one key per bucket, so the quota holds across
-- every gateway instance.

local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local next_tat = tat + interval
local allow_at = next_tat - burst * interval
if now < allow_at then
  return {'refused', 'retry_after_ms', math.ceil((allow_at - now) / 1000),
    'reset_ms', math.ceil((tat - now) / 1000)}
end
local reset_ms = math.ceil((next_tat - now) / 1000)
-- %d, not tostring: tostring would print 1.7e+15 for a number this large.
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', reset_ms)
return {'allowed', 'remaining', math.floor((now - allow_at) / interval), 'reset_ms', reset_ms}
