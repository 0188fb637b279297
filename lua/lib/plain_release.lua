-- lib/plain_release.lua: the release by the holder of a plain lock (not
-- streamed) that nobody waits for or watches, in one place for the two
-- scripts that do it: release_plain.lua (after the other lock libraries,
-- in the function library) and purchase.lua, which releases the buyer's
-- lock in the same call as the purchase where one Redis holds both (this
-- file is put before it; it uses nothing of the other libraries).
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
  local place = redis.call('HMGET', lock, 'owner', 'fence', 'holds', 'streamed', 'session')
  if not place[1] or place[4] then
    return {'busy'}
  end
  if place[1] ~= token then
    return {'not-owner'}
  end
  if fence and tonumber(place[2]) ~= fence then
    return {'not-owner'}
  end
  if not all and tonumber(place[3]) > 1 then
    return {'holds-left', 'holds', redis.call('HINCRBY', lock, 'holds', -1)}
  end
  -- Waiters are served and watchers told by release.lua, before anything
  -- changes here.
  if redis.call('EXISTS', queue, watch) > 0 then
    return {'busy'}
  end
  redis.call('DEL', lock)
  -- The fence is kept as %d text already: the message release.lua sends.
  redis.call(publish, channel, place[2])
  return {'released', 'session', place[5] and string.match(place[5], '^(%S+)') or ''}
end
