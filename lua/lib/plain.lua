-- lib/plain.lua: the holder of a plain lock (exclusive, one place), written
-- once: the fields of its hash, and how they are written, read, held again
-- and released. Every lock script has it (the function library puts it
-- after lib/base.lua), and so has purchase.lua, which releases the buyer's
-- lock in the same call as the purchase where one Redis holds both (this
-- file is put before it; it uses nothing of the other libraries).
--
-- lock  hash <prefix>lock:{<key>}: owner (the holder's token), holds (its
--       re-entrant holds), fence (its fencing token, as %d text), at
--       (granted at, Unix ms), and when its grant had them streamed (1, a
--       streamed lock's holder), value (its public value), idem and body
--       (the Idempotency-Key it was granted under, and its request's hash),
--       session (`<session handle> <its lock-delay ms>`, for a holder whose
--       lock lives as long as its session); beside them delayed
--       (lib/holders.lua: a lock-delay). Its TTL is the lease. A lock with
--       many holders has `mode` instead of `owner` (lib/holders.lua).
-- Other scripts read or set single fields by these names (a view, a
-- value, a watch's start, a downgrade).

-- Writes `token`'s place in `lock`: `holds` holds, fencing token
-- `fence_text`, granted `at`, its lease ending at `ends` (Unix ms); `extra`:
-- nil (the common grant: no table to build), or a list of more field and
-- value pairs (streamed, value, idem and body, session, delayed).
local function write_plain(lock, token, holds, fence_text, at, ends, extra)
  if extra then
    redis.call('HSET', lock, 'owner', token, 'holds', holds, 'fence', fence_text, 'at', at,
      unpack(extra))
  else
    redis.call('HSET', lock, 'owner', token, 'holds', holds, 'fence', fence_text, 'at', at)
  end
  redis.call('PEXPIREAT', lock, ends)
end

-- The plain holder of `lock` as its hash records it, read in one call: a
-- table (token, fence as a number and fence_text as kept, holds, streamed,
-- value, session, plain = true), or nil and whether the lock has holders
-- of another kind (a `mode`).
local function read_plain(lock)
  local place = redis.call('HMGET', lock, 'owner', 'fence', 'holds', 'streamed', 'value',
    'session', 'mode')
  if not place[1] then
    return nil, place[7] ~= false
  end
  return {token = place[1], fence = tonumber(place[2]), fence_text = place[2],
    holds = tonumber(place[3]), streamed = place[4], value = place[5], session = place[6],
    plain = true}
end

-- One hold more of the plain holder of `lock` (a re-entry), its lease now
-- ending at `ends`: how many it has.
local function hold_plain_again(lock, ends)
  local holds = redis.call('HINCRBY', lock, 'holds', 1)
  redis.call('PEXPIREAT', lock, ends)
  return holds
end

-- One hold less of the plain holder of `lock`: how many it has left.
local function let_go_of_plain_hold(lock)
  return redis.call('HINCRBY', lock, 'holds', -1)
end

-- The plain holder's place ends: the lock is free.
local function drop_plain(lock)
  redis.call('DEL', lock)
end

-- The release by the holder of a plain lock (not streamed) that nobody
-- waits for or watches, for the two scripts that do it: release_plain.lua
-- and purchase.lua.
--
-- lock, queue, watch  the lock's keys: <prefix>lock:{<key>}, queue, watch
-- publish             PUBLISH, or SPUBLISH in a Redis Cluster
-- channel             the lock's release channel, <prefix>released:{<key>}
-- token               the holder's token
-- all                 true to give up every hold at once, else one
-- fence               (or nil) the fencing token the holder's place must have
--
-- Returns {code, field, value, ...}, by code, as release.lua would:
--   released    the place is free; its release channel was told its
--               fencing token; session: the handle of the session it hung
--               on, or ''
--   holds-left  one re-entrant hold released: holds (what the holder has left)
--   not-owner   held by another token, or with another fencing token
--   busy        nothing done: no plain holder of that token (the lock has
--               holders of another kind, or none), a streamed holder, or
--               somebody waits for or watches the lock: release.lua's work
local function plain_release(lock, queue, watch, publish, channel, token, all, fence)
  local place = read_plain(lock)
  if not place or place.streamed then
    return {'busy'}
  end
  if place.token ~= token then
    return {'not-owner'}
  end
  if fence and place.fence ~= fence then
    return {'not-owner'}
  end
  if not all and place.holds > 1 then
    return {'holds-left', 'holds', let_go_of_plain_hold(lock)}
  end
  -- Waiters are served and watchers told by release.lua, before anything
  -- changes here.
  if redis.call('EXISTS', queue, watch) > 0 then
    return {'busy'}
  end
  drop_plain(lock)
  -- The fence is kept as %d text already: the message release.lua sends.
  redis.call(publish, channel, place.fence_text)
  return {'released', 'session', place.session and string.match(place.session, '^(%S+)') or ''}
end
