-- release.lua: give up one hold of a lock (or every hold of its token); a
-- holder's last hold frees its place. (After lib/holders.lua.)
--
-- KEYS[1]  lock hash  <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  holders    <prefix>holders:{<key>}
-- KEYS[3]  gone       <prefix>gone:{<key>}     streamed holders that released
-- ARGV[1]  the holder's token
-- ARGV[2]  the lock's release channel, published on when a place is freed
-- ARGV[3]  PUBLISH, or SPUBLISH in a Redis Cluster (the channel shares the
--          lock's hash tag, so its shard is the lock's slot)
-- ARGV[4]  "all" to give up every hold at once (a streamed lock whose client
--          left), else "one"
--
-- Returns {code, field, value, ...}, by code:
--   released    the holder's place is free and waiters were told
--   holds-left  one re-entrant hold released: holds (what the holder has left)
--   not-found   no such lock (never taken, released, or expired)
--   not-owner   held under other tokens
-- The message on the channel is the released holder's fencing token, so a
-- streamed lock can tell its own release from another holder's.

local lock, holders, gone = KEYS[1], KEYS[2], KEYS[3]
local token, channel, publish = ARGV[1], ARGV[2], ARGV[3]
local all = ARGV[4] == 'all'

local state = redis.call('HMGET', lock, 'owner', 'fence', 'mode', 'streamed')
local owner, fence, mode, streamed = state[1], state[2], state[3], state[4]
if owner then
  if owner ~= token then
    return {'not-owner'}
  end
  if not all then
    local holds = redis.call('HINCRBY', lock, 'holds', -1)
    if holds > 0 then
      return {'holds-left', 'holds', holds}
    end
  end
  if streamed then
    note_released(gone, token, redis.call('PTTL', lock))
  end
  redis.call('DEL', lock)
  redis.call(publish, channel, fence)
  return {'released'}
end
if not mode or drop_ended(lock, holders, now_ms()) == 0 then
  return {'not-found'}
end

local held = redis.call('HMGET', lock, 'h:' .. token, 'f:' .. token, 's:' .. token)
local holds, own_fence, own_streamed = tonumber(held[1]), held[2], held[3]
if not holds then
  return {'not-owner'}
end
local given_back = holds
if not all and holds > 1 then
  given_back = 1
end
redis.call('HINCRBY', lock, 'holds', -given_back)
if given_back < holds then
  return {'holds-left', 'holds', redis.call('HINCRBY', lock, 'h:' .. token, -1)}
end
if own_streamed then
  note_released(gone, token, tonumber(redis.call('ZSCORE', holders, token)) - now_ms())
end
redis.call('HDEL', lock, 'h:' .. token, 'f:' .. token, 's:' .. token)
redis.call('ZREM', holders, token)
if redis.call('ZCARD', holders) == 0 then
  redis.call('DEL', lock, holders)
else
  expire_with_latest(lock, holders)
end
redis.call(publish, channel, own_fence)
return {'released'}
