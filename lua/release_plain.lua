-- release_plain.lua: a release by the holder of a plain lock (not
-- streamed) that nobody waits for or watches, with only the keys and
-- arguments it uses; anything else is left to release.lua, which the
-- caller runs when told `busy`.
-- (After the lock libraries; its keys are three of lib/base.lua's. The
-- release itself is lib/plain.lua's, which purchase.lua runs too.)
--
-- KEYS[1]  lock     <prefix>lock:{<key>}
-- KEYS[2]  queue    <prefix>queue:{<key>}
-- KEYS[3]  watch    <prefix>watch:{<key>}
-- ARGV[1]  PUBLISH, or SPUBLISH in a Redis Cluster
-- ARGV[2]  the lock's release channel, <prefix>released:{<key>}
-- ARGV[3]  the holder's token
-- ARGV[4]  "all" to give up every hold at once, else "one"
-- ARGV[5]  (optional) the fencing token the holder's place must have
--
-- Returns {code, field, value, ...}, by code, as release.lua would:
--   released    the place is free; its release channel was told its
--               fencing token; session: the handle of the session it hung
--               on, or ''
--   holds-left  one re-entrant hold released: holds (what the holder has left)
--   not-owner   held by another token, or with another fencing token
--   busy        nothing done: no plain holder of that token (the lock has
--               holders of another kind, or none), a streamed holder, or
--               somebody waits for or watches the lock: run release.lua

return plain_release(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4] == 'all',
  tonumber(ARGV[5] or ''))
