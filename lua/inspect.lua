-- inspect.lua: read a lock's state without any holder's token. (After
-- lib/holders.lua.)
--
-- KEYS[1]  lock hash  <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  holders    <prefix>holders:{<key>}
--
-- Returns {code, field, value, ...}, by code:
--   held       fence (the newest grant's), holds (of every holder
--              together), ttl_ms and expires_at_ms (Unix ms: the time to,
--              and the end of, the latest lease), mode ('exclusive',
--              'shared' or 'counted'), limit (places: 1 for a plain lock, 0
--              for a shared one), holders (how many hold it)
--   not-found  no such lock

local lock, holders = KEYS[1], KEYS[2]

local state = redis.call('HMGET', lock, 'fence', 'holds', 'mode', 'limit', 'owner')
local fence, holds, mode, limit, owner = state[1], state[2], state[3], state[4], state[5]
if owner then
  local ttl = redis.call('PTTL', lock)
  if ttl < 0 then
    return {'not-found'}
  end
  return {'held', 'fence', tonumber(fence), 'holds', tonumber(holds), 'ttl_ms', ttl,
    'expires_at_ms', redis.call('PEXPIRETIME', lock), 'mode', 'exclusive', 'limit', 1, 'holders', 1}
end
local now = now_ms()
if not mode then
  return {'not-found'}
end
local count = drop_ended(lock, holders, now)
if count == 0 then
  return {'not-found'}
end
-- Read again: dropping ended holders changes the holds.
holds = tonumber(redis.call('HGET', lock, 'holds'))
local latest = tonumber(redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2])
return {'held', 'fence', tonumber(fence), 'holds', holds, 'ttl_ms', latest - now,
  'expires_at_ms', latest, 'mode', mode, 'limit', tonumber(limit or '0'), 'holders', count}
