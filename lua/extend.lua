-- extend.lua: renew a holder's lease, so it ends ttl_ms from now. (After
-- lib/holders.lua.)
--
-- KEYS[1]  lock hash      <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  fence counter  <prefix>fence:{<key>}
-- KEYS[3]  holders        <prefix>holders:{<key>}
-- KEYS[4]  gone           <prefix>gone:{<key>}     streamed holders that released
-- ARGV[1]  the holder's token
-- ARGV[2]  new lease in milliseconds
-- ARGV[3]  how long the fence counter outlives the lease, in milliseconds
--
-- Returns {code, field, value, ...}, by code:
--   extended   fence and holds (the holder's own), expires_at_ms (the
--              lease's new end, Unix ms)
--   not-found  no such lock: the lease was lost
--   not-owner  held under other tokens
--   released   the token no longer holds the lock because it released it
--              (a streamed holder, noted in the gone hash)

local lock, fence_key, holders, gone = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, fence_retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- Why the token holds the lock no more: its own release, or `otherwise`.
local function without_lock(otherwise)
  if redis.call('HEXISTS', gone, token) == 1 then
    return {'released'}
  end
  return {otherwise}
end

local state = redis.call('HMGET', lock, 'owner', 'mode')
local owner, mode = state[1], state[2]
if owner then
  if owner ~= token then
    return without_lock('not-owner')
  end
  redis.call('PEXPIRE', lock, ttl)
  -- Keep the fence counter alive at least as long as the lock it fences.
  redis.call('PEXPIRE', fence_key, ttl + fence_retention)
  local held = redis.call('HMGET', lock, 'fence', 'holds')
  return {'extended', 'fence', tonumber(held[1]), 'holds', tonumber(held[2]),
    'expires_at_ms', redis.call('PEXPIRETIME', lock)}
end
local now = now_ms()
if not mode or drop_ended(lock, holders, now) == 0 then
  return without_lock('not-found')
end

local held = redis.call('HMGET', lock, 'h:' .. token, 'f:' .. token)
if not held[1] then
  return without_lock('not-owner')
end
redis.call('ZADD', holders, now + ttl, token)
expire_with_latest(lock, holders)
-- Other holders' leases may be longer: only ever lengthen the counter's life.
if redis.call('PTTL', fence_key) < ttl + fence_retention then
  redis.call('PEXPIRE', fence_key, ttl + fence_retention)
end
return {'extended', 'fence', tonumber(held[2]), 'holds', tonumber(held[1]),
  'expires_at_ms', now + ttl}
