-- extend.lua: renew a lease, so it ends ttl_ms from now.
--
-- KEYS[1]  lock hash      <prefix>lock:{<key>}   fields owner, holds, fence
-- KEYS[2]  fence counter  <prefix>fence:{<key>}
-- ARGV[1]  the holder's token
-- ARGV[2]  new lease in milliseconds
-- ARGV[3]  how long the fence counter outlives the lease, in milliseconds
--
-- Returns {code, fencing_token, holds, expires_at_ms}:
--   code  1  extended
--   code  0  no such lock: the lease was lost
--   code -1  held under another token
-- expires_at_ms is the lease's new end in Unix ms (PEXPIRETIME); all but the
-- code are 0 for codes 0 and -1.

local lock, fence_key = KEYS[1], KEYS[2]
local token, ttl, fence_retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local owner = redis.call('HGET', lock, 'owner')
if not owner then
  return {0, 0, 0, 0}
end
if owner ~= token then
  return {-1, 0, 0, 0}
end

redis.call('PEXPIRE', lock, ttl)
-- Keep the fence counter alive at least as long as the lock it fences.
redis.call('PEXPIRE', fence_key, ttl + fence_retention)
local state = redis.call('HMGET', lock, 'fence', 'holds')
return {1, tonumber(state[1]), tonumber(state[2]), redis.call('PEXPIRETIME', lock)}
