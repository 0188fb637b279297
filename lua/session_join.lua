-- session_join.lua: a lock is being taken in the session (before the grant,
-- so that a session that ends meanwhile ends it too), or (with a fencing
-- token) was granted and hangs on it now. (Keys as session_open.lua.)
--
-- ARGV[1]  the holder's token
-- ARGV[2]  the lock's key
-- ARGV[3]  the mode (`exclusive`, `shared`, `counted`)
-- ARGV[4]  its fencing token, or 0 while it is being taken
--
-- Returns {code, field, value, ...}, by code:
--   joined     ttl_ms, lock_delay_ms, expires_at_ms (the session's)
--   not-found  no such session, or it has ended (or expired)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local session = redis.call('HMGET', KEYS[1], 'ttl', 'expires', 'ended', 'delay')
if not session[1] or session[3] or tonumber(session[2]) < now then
  return {'not-found'}
end
-- By token and key: a batch's locks share one token.
redis.call('HSET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[2])
return {'joined', 'ttl_ms', tonumber(session[1]), 'lock_delay_ms', tonumber(session[4]),
  'expires_at_ms', tonumber(session[2])}
