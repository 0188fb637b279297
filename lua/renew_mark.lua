-- renew_mark.lua: renew a waiting writer's mark (see lib/holders.lua), as
-- its instance does while the request waits. (After lib/holders.lua.)
--
-- KEYS[1]  writers  <prefix>writers:{<key>}
-- ARGV[1]  the waiting request's token
-- ARGV[2]  how long the request may still wait, in milliseconds
--
-- Returns {code}:
--   renewed  the mark stands another second (or to the end of the wait)
--   gone     there is no mark: it lapsed (the instance was paused past it)
--            or the request was granted meanwhile; nothing changed

local writers, token, wait_ms = KEYS[1], ARGV[1], tonumber(ARGV[2])

if not redis.call('ZSCORE', writers, token) then
  return {'gone'}
end
mark_writer(writers, token, now_ms(), wait_ms)
return {'renewed'}
