-- release.lua: give up one hold of a lock (or every hold of its token); the
-- last one frees it.
--
-- KEYS[1]  lock hash  <prefix>lock:{<key>}  fields owner, holds, fence
-- ARGV[1]  the holder's token
-- ARGV[2]  the lock's release channel, published on when the lock is freed
-- ARGV[3]  PUBLISH, or SPUBLISH in a Redis Cluster (the channel shares the
--          lock's hash tag, so its shard is the lock's slot)
-- ARGV[4]  "all" to give up every hold at once (a streamed lock whose client
--          left), else "one"
--
-- Returns {code, holds}:
--   code  1  released: the lock is free and waiters were told (holds = 0)
--   code  2  one re-entrant hold released; holds is what is left
--   code  0  no such lock (never taken, released, or expired)
--   code -1  held under another token
-- The message on the channel is the released holder's fencing token, so a
-- streamed lock can tell its own release from an earlier holder's.

local lock, token, channel, publish = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local all = ARGV[4] == 'all'

local state = redis.call('HMGET', lock, 'owner', 'fence')
local owner, fence = state[1], state[2]
if not owner then
  return {0, 0}
end
if owner ~= token then
  return {-1, 0}
end

if not all then
  local holds = redis.call('HINCRBY', lock, 'holds', -1)
  if holds > 0 then
    return {2, holds}
  end
end
redis.call('DEL', lock)
redis.call(publish, channel, fence)
return {1, 0}
