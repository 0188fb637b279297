-- release.lua: give up one hold of a lock; the last one frees it.
--
-- KEYS[1]  lock hash  <prefix>lock:{<key>}  fields owner, holds, fence
-- ARGV[1]  the holder's token
-- ARGV[2]  the lock's release channel, published on when the lock is freed
-- ARGV[3]  PUBLISH, or SPUBLISH in a Redis Cluster (the channel shares the
--          lock's hash tag, so its shard is the lock's slot)
--
-- Returns {code, holds}:
--   code  1  released: the lock is free and waiters were told (holds = 0)
--   code  2  one re-entrant hold released; holds is what is left
--   code  0  no such lock (never taken, released, or expired)
--   code -1  held under another token

local lock, token, channel, publish = KEYS[1], ARGV[1], ARGV[2], ARGV[3]

local owner = redis.call('HGET', lock, 'owner')
if not owner then
  return {0, 0}
end
if owner ~= token then
  return {-1, 0}
end

local holds = redis.call('HINCRBY', lock, 'holds', -1)
if holds > 0 then
  return {2, holds}
end
redis.call('DEL', lock)
redis.call(publish, channel, 'released')
return {1, 0}
