-- extend.lua: renew a holder's lease, so it ends ttl_ms from now. (After
-- lib/holders.lua.)
--
-- KEYS[1]  lock hash      <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  fence counter  <prefix>fence:{<key>}
-- KEYS[3]  holders        <prefix>holders:{<key>}
-- ARGV[1]  the holder's token
-- ARGV[2]  new lease in milliseconds
-- ARGV[3]  how long the fence counter outlives the lease, in milliseconds
--
-- Returns {code, fencing_token, holds, expires_at_ms}:
--   code  1  extended
--   code  0  no such lock: the lease was lost
--   code -1  held under other tokens
-- fencing_token and holds are the holder's own; expires_at_ms is the
-- lease's new end in Unix ms; all but the code are 0 for codes 0 and -1.

local lock, fence_key, holders = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, fence_retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local state = redis.call('HMGET', lock, 'owner', 'mode')
local owner, mode = state[1], state[2]
if owner then
  if owner ~= token then
    return {-1, 0, 0, 0}
  end
  redis.call('PEXPIRE', lock, ttl)
  -- Keep the fence counter alive at least as long as the lock it fences.
  redis.call('PEXPIRE', fence_key, ttl + fence_retention)
  local held = redis.call('HMGET', lock, 'fence', 'holds')
  return {1, tonumber(held[1]), tonumber(held[2]), redis.call('PEXPIRETIME', lock)}
end
local now = now_ms()
if not mode or drop_ended(lock, holders, now) == 0 then
  return {0, 0, 0, 0}
end

local held = redis.call('HMGET', lock, 'h:' .. token, 'f:' .. token)
if not held[1] then
  return {-1, 0, 0, 0}
end
redis.call('ZADD', holders, now + ttl, token)
expire_with_latest(lock, holders)
-- Other holders' leases may be longer: only ever lengthen the counter's life.
if redis.call('PTTL', fence_key) < ttl + fence_retention then
  redis.call('PEXPIRE', fence_key, ttl + fence_retention)
end
return {1, tonumber(held[2]), tonumber(held[1]), now + ttl}
