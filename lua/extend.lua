-- extend.lua: renew a holder's lease, so it ends ttl_ms from now; also how
-- a waiter granted a place from the queue claims it for its whole lease.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  the holder's token
-- ARGV[5]  new lease in milliseconds
-- ARGV[6]  how long the fence counter outlives the lease, in milliseconds
--
-- Returns {code, field, value, ...}, by code:
--   extended   fence and holds (the holder's own), expires_at_ms (the
--              lease's new end, Unix ms)
--   not-found  no such lock: the lease was lost
--   not-owner  held under other tokens
--   released   the token holds the lock no more because it released it (a
--              streamed holder, noted in the gone hash)
--   revoked    the same, because the lock was revoked

local ctx = context(KEYS, ARGV)
local token, ttl, keep = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms(ctx)

local place, why = holder(ctx, token)
if not place then
  return {redis.call('HGET', ctx.gone, token) or no_place(ctx, why)}
end
local ends = now + ttl
local mode = 'exclusive'
if place.plain then
  redis.call('PEXPIREAT', ctx.lock, ends)
  -- Keep the fence counter alive at least as long as the lock it fences.
  redis.call('PEXPIRE', ctx.fence, ttl + keep)
else
  mode = redis.call('HGET', ctx.lock, 'mode')
  redis.call('ZADD', ctx.holders, ends, token)
  expire_with_latest(ctx)
  -- Other holders' leases may be longer: only ever lengthen its life.
  if redis.call('PTTL', ctx.fence) < ttl + keep then
    redis.call('PEXPIRE', ctx.fence, ttl + keep)
  end
end
-- A place offered from the queue is announced now, claimed for its lease.
on_claimed(ctx, token, place.fence, place.value, mode, ends)
return {'extended', 'fence', place.fence, 'holds', place.holds, 'expires_at_ms', ends}
