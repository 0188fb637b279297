-- rate_limit.lua: GCRA (generic cell rate algorithm) on the Redis clock.
--
-- KEYS[1]  the bucket, e.g. <prefix>rate:{user:<user_id>}: the theoretical
--          arrival time in µs; it expires once the bucket is full again
-- ARGV[1]  emission interval in µs (1 000 000 / rate per second)
-- ARGV[2]  burst: how many requests may arrive at once
--
-- Returns {allowed, remaining, retry_after_ms, reset_ms}:
--   allowed         1 if this request is admitted (and counted), else 0
--   remaining       requests that would be admitted right after this one
--   retry_after_ms  when a refused request may be admitted (0 if allowed)
--   reset_ms        when the bucket is full again
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
  return {0, 0, math.ceil((allow_at - now) / 1000), math.ceil((tat - now) / 1000)}
end
local reset_ms = math.ceil((next_tat - now) / 1000)
-- %d, not tostring: tostring would print 1.7e+15 for a number this large.
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', reset_ms)
return {1, math.floor((now - allow_at) / interval), 0, reset_ms}
