-- session_view.lua: a session as its holder may see it. (Keys as
-- session_open.lua.)
--
-- Returns {code, field, value, ...}, by code:
--   alive      ttl_ms, expires_at_ms, lock_delay_ms, value (or false),
--              principal (or ''), locks (a JSON list of [mode, fencing
--              token, lock key], the fencing token 0 for one being taken)
--   not-found  no such session, or it has ended (or expired)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local session = redis.call('HMGET', KEYS[1], 'ttl', 'expires', 'ended', 'delay', 'value',
  'principal')
if not session[1] or session[3] or tonumber(session[2]) < now then
  return {'not-found'}
end
local locks = {}
for _, record in ipairs(redis.call('HVALS', KEYS[2])) do
  local mode, fence, key = string.match(record, '^(%S+) (%S+) (.*)$')
  locks[#locks + 1] = cjson.encode({mode, fence, key})
end
return {'alive', 'ttl_ms', tonumber(session[1]), 'expires_at_ms', tonumber(session[2]),
  'lock_delay_ms', tonumber(session[4]), 'value', session[5] or false,
  'principal', session[6] or '', 'locks', '[' .. table.concat(locks, ',') .. ']'}
