-- withdraw.lua: remove an exclusive request's mark as a waiting writer (it
-- stopped waiting without the lock), and tell the lock's waiters, since
-- shared requests that waited behind it may now be granted.
--
-- KEYS[1]  writers  <prefix>writers:{<key>}  see lib/holders.lua
-- ARGV[1]  the request's token
-- ARGV[2]  the lock's release channel
-- ARGV[3]  PUBLISH, or SPUBLISH in a Redis Cluster
--
-- Returns {code}:
--   withdrawn   the mark was removed and the waiters told
--   not-marked  there was no such mark (nothing changed)
-- The message is "0", a fencing token no holder has.

local writers, token, channel, publish = KEYS[1], ARGV[1], ARGV[2], ARGV[3]

if redis.call('ZREM', writers, token) == 0 then
  return {'not-marked'}
end
redis.call(publish, channel, '0')
return {'withdrawn'}
