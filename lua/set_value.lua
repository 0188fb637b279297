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
--              lease's end, unchanged)
--   not-found  no such lock
--   not-owner  held under other tokens
--   released   the token released the lock (a streamed holder); revoked:
--   revoked    as extend.lua says

local ctx = context()
local token, value = ARGV[4], ARGV[5] == '1' and ARGV[6]
local now = now_ms()

local place = holder(ctx, token, now)
if not place then
  local why = redis.call('HGET', ctx.gone, token)
  if why then
    return {why}
  end
  if held(ctx, now).kind == 'free' then
    return {'not-found'}
  end
  return {'not-owner'}
end
local field = 'v:' .. token
if redis.call('HEXISTS', ctx.lock, 'owner') == 1 then
  field = 'value'
end
if value then
  redis.call('HSET', ctx.lock, field, value)
else
  redis.call('HDEL', ctx.lock, field)
end
on_value(ctx, place.fence, value)
return {'set', 'fence', place.fence, 'holds', place.holds, 'expires_at_ms', place.ends}
