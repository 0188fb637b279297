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
--          release happens only if it does (else not-owner); '' for none
-- ARGV[8]  (optional) the release's Idempotency-Key (scoped by its
--          caller), and ARGV[9] how long what it did is kept under it, in
--          milliseconds: a retry with the same key and token answers that
--          again, however the lock stands now (a release answered 503 may
--          have taken effect)
-- ARGV[10] (optional) the release's span, as a W3C traceparent, when it is
--          traced: told to the waiters it grants, whose spans link to it
--
-- Returns {code, field, value, ...}, by code:
--   released    the holder's place is free (or granted to the next waiter);
--               its release channel was told its fencing token; session:
--               the handle of the session it hung on (that session forgets
--               it), or ''
--   holds-left  one re-entrant hold released: holds (what the holder has left)
--   not-found   no such lock (never taken, released, or expired)
--   not-owner   held under other tokens
--   key-reused  the Idempotency-Key was given to a release by another token
-- A release answered again under its Idempotency-Key has `replayed` 1.

local ctx = context(KEYS, ARGV)
local token, all, keep = ARGV[4], ARGV[5] == 'all', tonumber(ARGV[6])
local fence = tonumber(ARGV[7] or '')
local idem, kept = (ARGV[8] or '') ~= '' and 'r:' .. ARGV[8], tonumber(ARGV[9] or '0')
if (ARGV[10] or '') ~= '' then
  ctx.cause = ARGV[10]
end

-- What a release under an Idempotency-Key did, kept in `gone` (the lock's
-- slot): `<token> released <session>` or `<token> holds-left <holds>`.
if idem then
  local done = redis.call('HGET', ctx.gone, idem)
  if done then
    local by, code, value = string.match(done, '^(%S+) (%S+) ?(%S*)$')
    if by ~= token then
      return {'key-reused'}
    end
    if code == 'released' then
      return {'released', 'session', value, 'replayed', 1}
    end
    return {'holds-left', 'holds', tonumber(value), 'replayed', 1}
  end
end
local function done(code, value)
  if idem then
    redis.call('HSET', ctx.gone, idem, token .. ' ' .. code .. ' ' .. value)
    if redis.call('PTTL', ctx.gone) < kept then
      redis.call('PEXPIRE', ctx.gone, kept)
    end
  end
end

local place, why = holder(ctx, token)
if not place then
  return {no_place(ctx, why)}
end
if fence and place.fence ~= fence then
  return {'not-owner'}
end
if not all and place.holds > 1 then
  local holds
  if place.plain then
    holds = let_go_of_plain_hold(ctx.lock)
  else
    redis.call('HINCRBY', ctx.lock, 'holds', -1)
    holds = redis.call('HINCRBY', ctx.lock, 'h:' .. token, -1)
  end
  done('holds-left', holds)
  return {'holds-left', 'holds', holds}
end
take_place(ctx, token, place, 'released')
if queued(ctx) then
  serve(ctx, keep)
end
done('released', session_of(place) or '')
return {'released', 'session', session_of(place) or ''}
