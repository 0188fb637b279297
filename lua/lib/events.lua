-- lib/events.lua: a lock's events, written by the script that makes the
-- change (so their order is the changes' order), and only while someone
-- watches the lock: a lock nobody watches writes nothing.
--
-- watch    hash: its expiry is the watch (the watching instances renew
--          it); field f:<fence> -> token for each holder granted while
--          watched, whose end (released, revoked, or expired) is owed an
--          event; o:<fence> -> token for a place offered to a waiter and
--          not yet claimed (its `acquired` comes with the claim, and an
--          offer that lapses or is given back was never news)
-- events   stream: entries {type, data}; a `start` entry marks where the
--          history begins again after nobody watched (a reader from before
--          it has a gap); capped, and kept a while after its last entry
--
-- Each event is also published on the lock's events channel as
-- `<id> <type> <data>`, for the watchers the instances hold open.

-- How many events the history keeps (about: XADD MAXLEN ~).
local EVENTS_KEPT = 1000
-- How long the history outlives its last event.
local HISTORY_KEPT_MS = 600000

-- The watch's field of the holder with fencing token `fence` (a number or
-- its text), `f:` or (an offer) `o:`: %d, since `..` would write a number
-- as 1.79e+15.
local function fence_field(fence, kind)
  return (kind or 'f:') .. string.format('%d', fence)
end

local function watched(ctx)
  return busy(ctx) and redis.call('EXISTS', ctx.watch) == 1
end

-- Appends an event and tells the watchers; returns its id.
local function record(ctx, kind, data)
  local id = redis.call('XADD', ctx.events, 'MAXLEN', '~', EVENTS_KEPT, '*',
    'type', kind, 'data', data)
  redis.call('PEXPIRE', ctx.events, HISTORY_KEPT_MS)
  redis.call(ctx.publish, channel(ctx, 'events'), id .. ' ' .. kind .. ' ' .. data)
  return id
end

-- A holder was granted the lock. A session's holder names its session
-- (the handle, public): its lease is the session's, which the gateway
-- sending the event reads (the session's keys are in another slot).
local function on_acquired(ctx, token, fence, value, mode, expires_at, session)
  if not watched(ctx) then
    return
  end
  redis.call('HSET', ctx.watch, fence_field(fence), token)
  record(ctx, 'acquired', json({{'key', ctx.key}, {'fencing_token', fence},
    {'value', value or false}, {'mode', mode}, {'expires_at_ms', expires_at},
    {'session', session or false}}))
end

-- A place was offered to a waiter, until it claims it.
local function on_offered(ctx, token, fence)
  if watched(ctx) then
    redis.call('HSET', ctx.watch, fence_field(fence, 'o:'), token)
  end
end

-- A waiter claimed the place it was offered, for its whole lease.
local function on_claimed(ctx, token, fence, value, mode, expires_at, session)
  if watched(ctx) and redis.call('HDEL', ctx.watch, fence_field(fence, 'o:')) == 1 then
    on_acquired(ctx, token, fence, value, mode, expires_at, session)
  end
end

-- A holder's place ended: `released`, `revoked` or `expired`. An offer
-- that ends unclaimed was never announced, and ends silently.
local function on_ended(ctx, kind, fence)
  if not watched(ctx) then
    return
  end
  if redis.call('HDEL', ctx.watch, fence_field(fence, 'o:')) == 1 then
    return
  end
  redis.call('HDEL', ctx.watch, fence_field(fence))
  record(ctx, kind, json({{'key', ctx.key}, {'fencing_token', fence}}))
end

-- A holder changed its mode without letting go: `mode` is now 'exclusive'
-- (an upgrade, with the new fencing token `fence`) or 'shared' (a
-- downgrade, keeping `was_fence`).
local function on_mode(ctx, token, was_fence, fence, mode, expires_at)
  if not watched(ctx) then
    return
  end
  redis.call('HDEL', ctx.watch, fence_field(was_fence))
  redis.call('HSET', ctx.watch, fence_field(fence), token)
  record(ctx, 'mode', json({{'key', ctx.key}, {'fencing_token', fence},
    {'previous_fencing_token', was_fence}, {'mode', mode}, {'expires_at_ms', expires_at}}))
end

-- No place is granted until `until_ms`: the lock-delay of a session that
-- held it and expired (or was revoked).
local function on_delayed(ctx, until_ms)
  if watched(ctx) then
    record(ctx, 'delayed', json({{'key', ctx.key}, {'delayed_until_ms', until_ms}}))
  end
end

-- A holder replaced its value.
local function on_value(ctx, fence, value)
  if watched(ctx) then
    record(ctx, 'value', json({{'key', ctx.key}, {'fencing_token', fence},
      {'value', value or false}}))
  end
end
