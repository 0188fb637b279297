-- session_keep.lua: a keepalive: the session's lease starts again, the same
-- few commands however many locks hang on it. (Keys as session_open.lua.)
--
-- ARGV[1]  a new ttl_ms, or '' to keep the session's
--
-- Returns {code, field, value, ...}, by code:
--   kept       ttl_ms, expires_at_ms, locks (how many hang on it)
--   not-found  no such session, or it has ended (or expired, and is being
--              swept)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local session = redis.call('HMGET', KEYS[1], 'ttl', 'expires', 'ended')
if not session[1] or session[3] or tonumber(session[2]) < now then
  return {'not-found'}
end
local ttl = tonumber(ARGV[1] ~= '' and ARGV[1] or session[1])
redis.call('HSET', KEYS[1], 'ttl', ttl, 'expires', now + ttl)
return {'kept', 'ttl_ms', ttl, 'expires_at_ms', now + ttl, 'locks', redis.call('HLEN', KEYS[2])}
