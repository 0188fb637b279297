-- extend.lua: renew a holder's lease, so it ends ttl_ms from now; also how
-- a waiter granted a place from the queue claims it for its whole lease.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  the holder's token
-- ARGV[5]  new lease in milliseconds; a session's holder's lease only
--          ever lengthens (once attached, it is its session's)
-- ARGV[6]  how long the fence counter outlives the lease, in milliseconds
-- ARGV[7]  "1" to attach a session's holder to its session: its lease
--          becomes SESSION_LEASE, ended by its session's end (the gateway
--          attaches it once the session confirmed it holds the lock)
--
-- Returns {code, field, value, ...}, by code:
--   extended   fence and holds (the holder's own), expires_at_ms (the
--              lease's new end, Unix ms), and session (its session's
--              handle, or '': a session holder's lease is its session's)
--   not-found  no such lock: the lease was lost
--   not-owner  held under other tokens
--   released   the token holds the lock no more because it released it (a
--              streamed holder, noted in the gone hash)
--   revoked    the same, because the lock was revoked

local ctx = context(KEYS, ARGV)
local token, ttl, keep = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local attach = ARGV[7] == '1'
local now = now_ms(ctx)

local place, why = holder(ctx, token)
if not place then
  return {redis.call('HGET', ctx.gone, token) or no_place(ctx, why)}
end
local session = session_of(place)
-- The fence counter outlives the lock it fences; a session's lock has no
-- end in time, and once the counter expires the clock keeps its tokens
-- increasing (see next_fence).
local fence_kept = ttl + keep
if session then
  local ends = attach and SESSION_LEASE or math.max(lease_end(ctx, place), now + ttl)
  ttl = ends - now
  fence_kept = keep
end
local ends = now + ttl
local mode = 'exclusive'
if place.plain then
  redis.call('PEXPIREAT', ctx.lock, ends)
  redis.call('PEXPIRE', ctx.fence, fence_kept)
else
  mode = redis.call('HGET', ctx.lock, 'mode')
  redis.call('ZADD', ctx.holders, ends, token)
  expire_with_latest(ctx)
  -- Other holders' leases may be longer: only ever lengthen its life.
  if redis.call('PTTL', ctx.fence) < fence_kept then
    redis.call('PEXPIRE', ctx.fence, fence_kept)
  end
end
-- A place offered from the queue is announced now, claimed for its lease.
on_claimed(ctx, token, place.fence, place.value, mode, ends, session)
return {'extended', 'fence', place.fence, 'holds', place.holds, 'expires_at_ms', ends,
  'session', session or ''}
