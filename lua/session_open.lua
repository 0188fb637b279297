-- session_open.lua: a new session: one liveness lease that locks hang on.
--
-- KEYS[1]  <prefix>session:{<handle>}        the session (hash: ttl, delay,
--          expires, since, value, principal; ended and delayed_until once
--          it ends)
-- KEYS[2]  <prefix>session:{<handle>}:locks  its locks: holder token ->
--          `<mode> <fencing token> <lock key>` (fencing token 0 while the
--          lock is being taken)
-- ARGV[1]  ttl_ms
-- ARGV[2]  lock_delay_ms
-- ARGV[3]  "1" when a value is given, else "0"
-- ARGV[4]  the value (public)
-- ARGV[5]  the principal that owns it ('' without permissions)
--
-- Returns {code, field, value, ...}, by code:
--   opened  expires_at_ms
--   exists  a session with this handle exists (never, for a fresh id)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists'}
end
local ttl = tonumber(ARGV[1])
local fields = {'ttl', ttl, 'delay', tonumber(ARGV[2]), 'expires', now + ttl, 'since', now}
if ARGV[3] == '1' then
  fields[#fields + 1], fields[#fields + 2] = 'value', ARGV[4]
end
if ARGV[5] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'principal', ARGV[5]
end
redis.call('HSET', KEYS[1], unpack(fields))
return {'opened', 'expires_at_ms', now + ttl}
