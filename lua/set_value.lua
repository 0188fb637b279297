-- set_value.lua: a holder replaces its public value (an election's
-- "proclaim"). (After the lock libraries: KEYS and ARGV[1..3] as
-- lib/base.lua says.)
--
-- ARGV[4]  the holder's token
-- ARGV[5]  "1" when a value is given, else "0" (the value is removed)
-- ARGV[6]  the value
--
-- Returns {code, field, value, ...}, by code:
--   set        fence and holds (the holder's own), expires_at_ms (its
--              lease's end, unchanged), ttl_ms (what is left of the lease),
--              session (the handle of its session, whose lease it is; or '')
--   not-found  no such lock
--   not-owner  held under other tokens
--   released   the token released the lock (a streamed holder); revoked:
--   revoked    as extend.lua says

local ctx = context(KEYS, ARGV)
local token, value = ARGV[4], ARGV[5] == '1' and ARGV[6]
local now = now_ms(ctx)

local place, why = holder(ctx, token)
if not place then
  return {redis.call('HGET', ctx.gone, token) or no_place(ctx, why)}
end
local field = 'v:' .. token
if place.plain then
  field = 'value'
end
if value then
  redis.call('HSET', ctx.lock, field, value)
else
  redis.call('HDEL', ctx.lock, field)
end
on_value(ctx, place.fence, value)
local ends = lease_end(ctx, place)
return {'set', 'fence', place.fence, 'holds', place.holds, 'expires_at_ms', ends,
  'ttl_ms', math.max(ends - now, 0), 'session', session_of(place) or ''}
