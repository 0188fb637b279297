-- inspect.lua: read a lock's state without any holder's token. (After
-- lib/holders.lua.)
--
-- KEYS[1]  lock hash  <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  holders    <prefix>holders:{<key>}
--
-- Returns {code, fencing_token, holds, ttl_ms, expires_at_ms, shared, limit, holders}:
--   code  1  held: fencing_token is the newest grant's, holds those of every
--            holder together, ttl_ms and expires_at_ms (Unix ms) the time to
--            and the end of the latest lease; shared is 1 for a shared lock,
--            else 0; limit is the number of places (1 for a plain lock, 0
--            for a shared one); holders is how many hold it
--   code  0  no such lock (the other fields are 0)

local lock, holders = KEYS[1], KEYS[2]

local state = redis.call('HMGET', lock, 'fence', 'holds', 'mode', 'limit', 'owner')
local fence, holds, mode, limit, owner = state[1], state[2], state[3], state[4], state[5]
if owner then
  local ttl = redis.call('PTTL', lock)
  if ttl < 0 then
    return {0, 0, 0, 0, 0, 0, 0, 0}
  end
  return {1, tonumber(fence), tonumber(holds), ttl, redis.call('PEXPIRETIME', lock), 0, 1, 1}
end
local now = now_ms()
if not mode then
  return {0, 0, 0, 0, 0, 0, 0, 0}
end
local count = drop_ended(lock, holders, now)
if count == 0 then
  return {0, 0, 0, 0, 0, 0, 0, 0}
end
-- Read again: dropping ended holders changes the holds.
holds = tonumber(redis.call('HGET', lock, 'holds'))
local latest = tonumber(redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2])
local shared = mode == 'shared' and 1 or 0
return {1, tonumber(fence), holds, latest - now, latest, shared, tonumber(limit or '0'), count}
