-- inspect.lua: read a lock's state without its owner token.
--
-- KEYS[1]  lock hash  <prefix>lock:{<key>}  fields owner, holds, fence
--
-- Returns {code, fencing_token, holds, ttl_ms, expires_at_ms}:
--   code  1  held; ttl_ms is the remaining lease, expires_at_ms its end in
--            Unix ms (PEXPIRETIME)
--   code  0  no such lock (the other fields are 0)

local lock = KEYS[1]

local state = redis.call('HMGET', lock, 'fence', 'holds')
local ttl = redis.call('PTTL', lock)
if not state[1] or ttl < 0 then
  return {0, 0, 0, 0, 0}
end
return {1, tonumber(state[1]), tonumber(state[2]), ttl, redis.call('PEXPIRETIME', lock)}
