-- mode.lua: a holder changes its mode without letting go: a shared holder
-- becomes the exclusive one (upgrade), at once if it holds the lock alone,
-- else waiting at the head of the queue for the other shared holders to
-- leave; an exclusive holder of a plain lock becomes a shared one
-- (downgrade), and the shared waiters behind it come in. (After the lock
-- libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  the holder's token
-- ARGV[5]  the mode it asks for: 'exclusive' or 'shared'
-- ARGV[6]  how long a fence counter outlives a lease, in milliseconds
-- ARGV[7]  how long it may still wait, in milliseconds
-- ARGV[8]  the waiter's id when it should wait at the head of the queue
--          if it cannot upgrade now (its instance is subscribed to its
--          grant channel), else ''
-- ARGV[9]  the instance it waits on
--
-- Returns {code, field, value, ...}, by code:
--   changed        it holds the lock in that mode now (or did already):
--                  fence, holds, expires_at_ms, ttl_ms (until then), mode,
--                  session (its session's handle, or '')
--   queued         waiting to upgrade: free_in_ms (until the earliest
--                  lease ends)
--   held           others hold it shared, and no wait: free_in_ms
--   deadlock       another holder waits to upgrade already: each would
--                  wait for the other (it keeps its shared place)
--   mode-conflict  a counting lock's holder (it has no other mode)
--   not-found      no such lock
--   not-owner      held under other tokens

local ctx = context(KEYS, ARGV)
local token, mode, keep = ARGV[4], ARGV[5], tonumber(ARGV[6])
local wait_ms, waiter_id, instance = tonumber(ARGV[7]), ARGV[8], ARGV[9]

local function changed(place, fence, ends, now_mode)
  return {'changed', 'fence', fence, 'holds', place.holds, 'expires_at_ms', ends,
    'ttl_ms', math.max(ends - now_ms(ctx), 0), 'mode', now_mode,
    'session', session_of(place) or ''}
end

local place, why = holder(ctx, token)
if not place then
  return {no_place(ctx, why)}
end
local state = held(ctx)
if state.kind == 'counted' then
  return {'mode-conflict'}
end
if mode == 'shared' then
  if state.kind == 'shared' then
    return changed(place, place.fence, lease_end(ctx, place), 'shared')
  end
  local ends = downgrade_place(ctx, token, place)
  if queued(ctx) then
    serve(ctx, keep)
  end
  return changed(place, place.fence, ends, 'shared')
end
if state.kind == 'exclusive' then
  return changed(place, place.fence, lease_end(ctx, place), 'exclusive')
end

-- A shared holder upgrading.
local upgrading = queued(ctx) and redis.call('HGET', ctx.waiters, '^upgrade')
if upgrading and upgrading ~= waiter_id then
  return {'deadlock'}
end
if state.count == 1 then
  if upgrading then
    dequeue(ctx, upgrading, waiter_entry(ctx, upgrading))
  end
  local fence, ends = upgrade_place(ctx, token, place, keep)
  return changed(place, fence, ends, 'exclusive')
end
local free_in = math.max(state.free_in, 1)
if waiter_id == '' or wait_ms <= 0 then
  return {'held', 'free_in_ms', free_in}
end
if not upgrading then
  local now = now_ms(ctx)
  enqueue(ctx, {id = waiter_id, inst = instance, token = token, mode = 'exclusive',
    limit = 1, ttl = 0, since = now, deadline = now + wait_ms, upgrade = 1}, 0)
  redis.call('HSET', ctx.waiters, '^upgrade', waiter_id)
end
return {'queued', 'free_in_ms', free_in}
