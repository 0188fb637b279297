-- inspect.lua: read a lock's state, its holders and its waiters, without
-- any token. (After the lock libraries: KEYS and ARGV[1..3] as
-- lib/base.lua says.)
--
-- Returns {code, field, value, ...}, by code:
--   held       mode ('exclusive', 'shared' or 'counted'), limit (places: 1
--              for a plain lock, 0 for a shared one), holders (how many),
--              holds (of every holder together), fence (the newest
--              grant's), ttl_ms and expires_at_ms (the time to, and the end
--              of, the latest lease), and JSON lists: leases (each holder's
--              fencing_token, value, holds, acquired_at_ms, expires_at_ms,
--              oldest grant first) and waiters (position, mode,
--              waiting_since_ms, in the order they will be served)
--   not-found  no such lock: waiters (as above), and delayed_until_ms (the
--              end of a lock-delay in force, else 0)

local ctx = context(KEYS, ARGV)
local now = now_ms(ctx)
local state, leases, waiters = lock_view(ctx)
if state.kind == 'free' or state.kind == 'delayed' then
  return {'not-found', 'waiters', waiters, 'delayed_until_ms', state.delayed or 0}
end
return {'held', 'mode', state.kind, 'limit', state.limit or 0, 'holders', state.count,
  'holds', state.holds, 'fence', state.fence, 'ttl_ms', state.latest - now,
  'expires_at_ms', state.latest, 'leases', leases, 'waiters', waiters}
