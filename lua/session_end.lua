-- session_end.lua: a session ends: it expired (the sweep), was deleted, or
-- its streamed keeper shut down. It is marked ended (no keepalive or new
-- lock from then on) and its locks are returned, for the caller to end
-- each on its own lock's keys; asked again, it answers the same (a sweep
-- that died half way is finished by the next). (Keys as session_open.lua.)
--
-- ARGV[1]  why: `expired`, `deleted` or `shutting-down`
-- ARGV[2]  "1" to end it even if it is alive (deleted, shut down), "0"
--          to end it only if it has expired
--
-- Returns {code, field, value, ...}, by code:
--   ending     why, delayed_until_ms (the end of the lock-delay its locks
--              keep: its expiry plus its lock_delay_ms, for an expiry; else
--              0), locks (a JSON list of [token, lock key]), ended_now (1
--              for the one call that marked it ended, 0 for a call after:
--              the end is counted once, whoever finishes it)
--   alive      it has not expired: expires_at_ms
--   not-found  no such session

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local session = redis.call('HMGET', KEYS[1], 'ttl', 'expires', 'ended', 'delay', 'delayed_until')
if not session[1] then
  return {'not-found'}
end
local why, delayed_until = session[3], tonumber(session[5] or '0')
local ended_now = 0
if not why then
  if ARGV[2] ~= '1' and tonumber(session[2]) >= now then
    return {'alive', 'expires_at_ms', tonumber(session[2])}
  end
  why = ARGV[1]
  -- From the expiry, not from the sweep: no earlier, no later.
  if why == 'expired' then
    delayed_until = tonumber(session[2]) + tonumber(session[4])
  end
  redis.call('HSET', KEYS[1], 'ended', why, 'delayed_until', delayed_until)
  ended_now = 1
end
local locks = {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  local key = string.match(entries[i + 1], '^%S+ %S+ (.*)$')
  locks[#locks + 1] = cjson.encode({string.match(entries[i], '^(%S+)'), key})
end
return {'ending', 'why', why, 'delayed_until_ms', delayed_until,
  'locks', '[' .. table.concat(locks, ',') .. ']', 'ended_now', ended_now}
