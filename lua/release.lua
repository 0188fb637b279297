-- release.lua: give up one hold of a lock (or every hold of a token); a
-- holder's last hold frees its place, which goes to the head of the queue.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  the holder's token
-- ARGV[5]  "all" to give up every hold at once (a streamed lock whose client
--          left), else "one"
-- ARGV[6]  how long a fence counter outlives a lease, in milliseconds (for
--          the waiters granted the place)
-- ARGV[7]  (optional) the fencing token the holder's place must have: its
--          release happens only if it does (else not-owner)
--
-- Returns {code, field, value, ...}, by code:
--   released    the holder's place is free (or granted to the next waiter);
--               its release channel was told its fencing token; session:
--               the handle of the session it hung on (that session forgets
--               it), or ''
--   holds-left  one re-entrant hold released: holds (what the holder has left)
--   not-found   no such lock (never taken, released, or expired)
--   not-owner   held under other tokens

local ctx = context(KEYS, ARGV)
local token, all, keep = ARGV[4], ARGV[5] == 'all', tonumber(ARGV[6])
local fence = tonumber(ARGV[7] or '')

local place, why = holder(ctx, token)
if not place then
  return {no_place(ctx, why)}
end
if fence and place.fence ~= fence then
  return {'not-owner'}
end
if not all and place.holds > 1 then
  if place.plain then
    return {'holds-left', 'holds', let_go_of_plain_hold(ctx.lock)}
  end
  redis.call('HINCRBY', ctx.lock, 'holds', -1)
  return {'holds-left', 'holds', redis.call('HINCRBY', ctx.lock, 'h:' .. token, -1)}
end
take_place(ctx, token, place, 'released')
if queued(ctx) then
  serve(ctx, keep)
end
return {'released', 'session', session_of(place) or ''}
