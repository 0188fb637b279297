-- watch.lua: start watching a lock (or keep watching it): the lock's state
-- now, and the id of the last event before it, from which its events
-- follow. (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua
-- says.)
--
-- Returns {code, field, value, ...}, by code:
--   held       the fields inspect.lua's `held` has, and last_id
--   not-found  nobody holds the lock: waiters (a JSON list), last_id, and
--              delayed_until_ms (the end of a lock-delay in force, else 0)

local ctx = context(KEYS, ARGV)
local now = now_ms(ctx)

keep_watching(ctx)
local newest = redis.call('XREVRANGE', ctx.events, '+', '-', 'COUNT', 1)[1]
local last = newest and newest[1] or record(ctx, 'start', '{}')
local state, leases, waiters = lock_view(ctx)
if state.kind == 'free' or state.kind == 'delayed' then
  return {'not-found', 'waiters', waiters, 'last_id', last, 'delayed_until_ms', state.delayed or 0}
end
return {'held', 'mode', state.kind, 'limit', state.limit or 0, 'holders', state.count,
  'holds', state.holds, 'fence', state.fence, 'ttl_ms', state.latest - now,
  'expires_at_ms', state.latest, 'leases', leases, 'waiters', waiters, 'last_id', last}
