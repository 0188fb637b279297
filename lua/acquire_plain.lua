-- acquire_plain.lua: a plain try (an exclusive lock, one place, no wait, no
-- re-entry, value or Idempotency-Key) of a lock nobody waits for or
-- watches, with only the keys and arguments it uses; anything else is left
-- to acquire.lua, which the caller runs when told `busy`. On one Redis
-- (not a Cluster, where a session's keys are in another slot) the try may
-- be in a session: the session is checked, joined and the lock attached
-- to it in the same step, where acquire.lua needs session_join.lua before
-- it and again after, and extend.lua.
-- (After the lock libraries; its keys are four of lib/base.lua's.)
--
-- KEYS[1]  lock     <prefix>lock:{<key>}
-- KEYS[2]  fence    <prefix>fence:{<key>}
-- KEYS[3]  queue    <prefix>queue:{<key>}
-- KEYS[4]  watch    <prefix>watch:{<key>}
-- KEYS[5]  (in a session) the session's hash, and KEYS[6] its locks (as
--          session_join.lua has them)
-- ARGV[1]  the new holder's token
-- ARGV[2]  lease in milliseconds (in a session: ignored, the session's)
-- ARGV[3]  how long the fence counter outlives the lease, in milliseconds
-- ARGV[4]  (in a session) its public handle, and ARGV[5] the lock's key
--
-- Returns {code, field, value, ...}, by code, as acquire.lua would:
--   granted  fence (a new fencing token), holds (1), ttl_ms, expires_at_ms;
--            in a session, ttl_ms and expires_at_ms are the session's, and
--            session its handle
--   held     a plain lock held by another: free_in_ms (its lease's end)
--   busy     nothing done: somebody waits for or watches the lock, or it
--            has holders of another kind, or a lock-delay: run acquire.lua
--   session-not-found  nothing done: the session has ended (or expired)

local lock, token, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local ctx = plain_context(lock, KEYS[2])
local session = KEYS[5] and redis.call('HMGET', KEYS[5], 'ttl', 'expires', 'ended', 'delay')
if session and (not session[1] or session[3] or tonumber(session[2]) < now_ms(ctx)) then
  return {'session-not-found'}
end
-- One constant check for everything a plain try does not handle: a lock
-- nobody holds, waits for or watches has none of these keys.
if redis.call('EXISTS', lock, KEYS[3], KEYS[4]) > 0 then
  -- A plain lock that is held has no place for anyone, waiting or not.
  if redis.call('HGET', lock, 'owner') then
    return {'held', 'free_in_ms', math.max(redis.call('PTTL', lock), 1)}
  end
  return {'busy'}
end
local now = now_ms(ctx)
if session then
  -- The session's lock lives as long as the session: no end in time, and
  -- the fence counter kept as extend.lua keeps it for an attached lock.
  local handle = ARGV[4]
  local fence, fence_text = next_fence(ctx, tonumber(ARGV[3]))
  write_plain(lock, token, 1, fence_text, now, SESSION_LEASE,
    {'session', handle .. ' ' .. session[4]})
  redis.call('HSET', KEYS[6], token .. ' ' .. ARGV[5], 'exclusive ' .. fence_text .. ' ' .. ARGV[5])
  return {'granted', 'fence', fence, 'holds', 1, 'ttl_ms', tonumber(session[1]),
    'expires_at_ms', tonumber(session[2]), 'session', handle}
end
local fence, fence_text = next_fence(ctx, ttl + tonumber(ARGV[3]))
local ends = now + ttl
write_plain(lock, token, 1, fence_text, now, ends)
return {'granted', 'fence', fence, 'holds', 1, 'ttl_ms', ttl, 'expires_at_ms', ends}
