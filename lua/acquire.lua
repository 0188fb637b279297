-- acquire.lua: take a lock for a new owner, or re-enter it for its holder.
--
-- KEYS[1]  lock hash      <prefix>lock:{<key>}   fields owner, holds, fence
-- KEYS[2]  fence counter  <prefix>fence:{<key>}  the last fencing token issued
-- ARGV[1]  token: a fresh owner token, or the holder's own when re-entering
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" when the client asks to re-enter with its token, else "0"
-- ARGV[4]  how long the fence counter outlives the lease, in milliseconds
--
-- Returns {code, fencing_token, holds, ttl_ms, expires_at_ms}:
--   code  1  granted to a new owner (holds = 1, a new fencing token)
--   code  2  re-entered: holds + 1, lease reset, fencing token unchanged
--   code  0  held by another owner; ttl_ms is the holder's remaining lease
--   code -1  re-entry asked with a token that does not hold the lock
-- expires_at_ms is the lease's end in Unix ms (PEXPIRETIME); fencing_token,
-- holds and expires_at_ms are 0 for codes 0 and -1.

local lock, fence_key = KEYS[1], KEYS[2]
local token, ttl, reenter = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local fence_retention = tonumber(ARGV[4])

local owner = redis.call('HGET', lock, 'owner')
if owner == token then
  local holds = redis.call('HINCRBY', lock, 'holds', 1)
  redis.call('PEXPIRE', lock, ttl)
  local fence = tonumber(redis.call('HGET', lock, 'fence'))
  return {2, fence, holds, ttl, redis.call('PEXPIRETIME', lock)}
end
if owner then
  local code = reenter and -1 or 0
  return {code, 0, 0, redis.call('PTTL', lock), 0}
end
if reenter then
  return {-1, 0, 0, 0, 0}
end

-- A new fencing token: one more than the last, and never below the Redis
-- clock in microseconds. The clock keeps tokens increasing after the counter
-- key has expired, so the counter need not be kept forever; the counter keeps
-- them increasing if the clock steps back while it lives.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last = tonumber(redis.call('GET', fence_key) or '0')
local fence = math.max(last + 1, now_us)
-- %d, not tostring: tostring would print 1.7e+15 for a number this large.
local fence_text = string.format('%d', fence)
redis.call('SET', fence_key, fence_text, 'PX', ttl + fence_retention)
redis.call('HSET', lock, 'owner', token, 'holds', 1, 'fence', fence_text)
redis.call('PEXPIRE', lock, ttl)
return {1, fence, 1, ttl, redis.call('PEXPIRETIME', lock)}
