-- acquire_plain.lua: a plain try (an exclusive lock, one place, no wait, no
-- re-entry, value, Idempotency-Key or session) of a lock nobody waits for
-- or watches, with only the keys and arguments it uses; anything else is
-- left to acquire.lua, which the caller runs when told `busy`.
-- (After the lock libraries; its keys are four of lib/base.lua's.)
--
-- KEYS[1]  lock     <prefix>lock:{<key>}
-- KEYS[2]  fence    <prefix>fence:{<key>}
-- KEYS[3]  queue    <prefix>queue:{<key>}
-- KEYS[4]  watch    <prefix>watch:{<key>}
-- ARGV[1]  the new holder's token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long the fence counter outlives the lease, in milliseconds
--
-- Returns {code, field, value, ...}, by code, as acquire.lua would:
--   granted  fence (a new fencing token), holds (1), ttl_ms, expires_at_ms
--   held     a plain lock held by another: free_in_ms (its lease's end)
--   busy     nothing done: somebody waits for or watches the lock, or it
--            has holders of another kind, or a lock-delay: run acquire.lua

local lock, token, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
-- One constant check for everything a plain try does not handle: a lock
-- nobody holds, waits for or watches has none of these keys.
if redis.call('EXISTS', lock, KEYS[3], KEYS[4]) > 0 then
  -- A plain lock that is held has no place for anyone, waiting or not.
  if redis.call('HGET', lock, 'owner') then
    return {'held', 'free_in_ms', math.max(redis.call('PTTL', lock), 1)}
  end
  return {'busy'}
end
local ctx = plain_context(lock, KEYS[2])
local now = now_ms(ctx)
local fence, fence_text = next_fence(ctx, ttl + tonumber(ARGV[3]))
local ends = now + ttl
write_plain(lock, token, 1, fence_text, now, ends)
return {'granted', 'fence', fence, 'holds', 1, 'ttl_ms', ttl, 'expires_at_ms', ends}
