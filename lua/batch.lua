-- batch.lua: several locks for one token, all or none, in one step; or,
-- when not every one has a place for it, a wait in each lock's queue
-- (joined in one step; see lib/queue.lua). Only on one Redis: the locks'
-- keys are in many Cluster slots. (After the lock libraries.)
--
-- KEYS     the eight keys of each lock as lib/base.lua says, lock after lock
-- ARGV[1]  PUBLISH
-- ARGV[2]  the key prefix
-- ARGV[3]  n, how many locks
-- ARGV[4..3+3n]  each lock's key, mode ('exclusive', 'shared' or
--          'counted') and places (as acquire.lua's ARGV[6]), lock after lock
-- then, from a = 4 + 3n:
-- ARGV[a]    the batch's token (one for every lock)
-- ARGV[a+1]  lease in milliseconds
-- ARGV[a+2]  how long the fence counters outlive the lease, in milliseconds
-- ARGV[a+3]  how long the batch may still wait, in milliseconds
-- ARGV[a+4]  its waiter id when it should wait if it gets no place now (its
--            instance is subscribed to each lock's grant channel), else ''
-- ARGV[a+5]  the instance it waits on
-- ARGV[a+6]  "1" when it gives a value, else "0"
-- ARGV[a+7]  the value (each lock's holder's)
-- ARGV[a+8]  the session it is taken in (`<handle> <lock-delay ms>`), or ''
--
-- Returns {code, field, value, ...}, by code:
--   granted         every lock: fences (each lock's fencing token, in the
--                   locks' order, comma-separated), expires_at_ms
--   queued          waiting in every lock's queue: key (the first lock
--                   without a place for it now), free_in_ms (each lock's,
--                   comma-separated: 0 for one with a place for it), and
--                   delayed_until_ms when a lock-delay alone keeps `key`
--   held            no place in `key` and no wait: free_in_ms (its own),
--                   and delayed_until_ms as above
--   limit-mismatch  `key` is held with another limit: limit

local n = tonumber(ARGV[3])
local a = 4 + 3 * n
local token, ttl, keep = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
local wait_ms, waiter_id, instance = tonumber(ARGV[a + 3]), ARGV[a + 4], ARGV[a + 5]
local value = ARGV[a + 6] == '1' and ARGV[a + 7]
local session = ARGV[a + 8] ~= '' and ARGV[a + 8]

-- The run's context, switched to lock i (the clock read once for all).
local lock_keys, lock_args = {}, {ARGV[1], ARGV[2], ''}
local seconds, micros
local function lock_at(i)
  for j = 1, 8 do
    lock_keys[j] = KEYS[8 * (i - 1) + j]
  end
  lock_args[3] = ARGV[4 + 3 * (i - 1)]
  local ctx = context(lock_keys, lock_args)
  ctx.seconds, ctx.micros = seconds, micros
  seconds, micros = clock(ctx)
  ctx.batch = waiter_id ~= '' and waiter_id
  return ctx
end

-- Lock i's mode, limit and permits.
local function wanted(i)
  local mode = ARGV[5 + 3 * (i - 1)]
  local limit, permits = string.match(ARGV[6 + 3 * (i - 1)], '^(%d+) ?(%d*)$')
  return mode, tonumber(limit), tonumber(permits) or 1
end

-- The first waiter of the queue that may be served now, if any.
local function first_here(ctx)
  for _, id in ipairs(redis.call('ZRANGE', ctx.queue, 0, -1)) do
    local waiter = waiter_entry(ctx, id)
    local now_standing = standing(ctx, waiter)
    if now_standing == 'here' then
      return id
    elseif now_standing == 'gone' then
      dequeue(ctx, id, waiter)
    end
  end
  return nil
end

-- Which locks have a place for the batch now: none is held in a way it
-- cannot share, and nobody who may be served waits ahead of it.
local ready, free_in, first_missing, missing_delay = {}, {}, nil, nil
local joined, missing_from_a_queue = 0, false
for i = 1, n do
  local ctx = lock_at(i)
  local mode, limit, permits = wanted(i)
  local state = held(ctx)
  if state.kind == 'exclusive' and mode == 'counted' then
    return {'limit-mismatch', 'key', ctx.key, 'limit', 1}
  end
  if state.kind == 'counted' and mode ~= 'shared' and state.limit ~= limit then
    return {'limit-mismatch', 'key', ctx.key, 'limit', state.limit}
  end
  local ahead = false
  if queued(ctx) then
    -- Those at the head who may go now go first.
    serve(ctx, keep)
    state = held(ctx)
    local first = first_here(ctx)
    ahead = first ~= nil and first ~= waiter_id
    if waiter_id ~= '' and redis.call('ZSCORE', ctx.queue, waiter_id) then
      joined = joined + 1
    else
      missing_from_a_queue = true
    end
  else
    missing_from_a_queue = true
  end
  ready[i] = not ahead and admits(state, mode, limit, permits)
  -- As text with %d: a session's holder frees at its session's end, far in
  -- the future, which Lua's own number text would write as 4.5e+15.
  free_in[i] = string.format('%d', ready[i] and 0 or math.max(state.free_in, 1))
  if not ready[i] and not first_missing then
    first_missing = i
    missing_delay = state.kind == 'delayed' and state.delayed or nil
  end
end

if not first_missing then
  local fences, ends = {}, 0
  for i = 1, n do
    local ctx = lock_at(i)
    local mode, limit, permits = wanted(i)
    if waiter_id ~= '' and redis.call('ZSCORE', ctx.queue, waiter_id) then
      dequeue(ctx, waiter_id, waiter_entry(ctx, waiter_id))
    end
    local request = grant_request(token, mode, tostring(limit), ttl)
    request.permits, request.value, request.session = permits, value, session
    local fence
    fence, ends = grant_place(ctx, request, ttl, keep)
    fences[i] = string.format('%d', fence)
    -- Shared waiters (or those a counting lock has places for) behind it
    -- may come in with it.
    if mode ~= 'exclusive' and queued(ctx) then
      serve(ctx, keep)
    end
  end
  return {'granted', 'fences', table.concat(fences, ','), 'expires_at_ms', ends}
end

local missing_key = ARGV[4 + 3 * (first_missing - 1)]
-- Without a place in `missing_key`: why, and (a lock-delay) until when.
local function missing(code, free_in_ms)
  if missing_delay then
    return {code, 'key', missing_key, 'free_in_ms', free_in_ms, 'delayed_until_ms', missing_delay}
  end
  return {code, 'key', missing_key, 'free_in_ms', free_in_ms}
end
if waiter_id == '' or wait_ms <= 0 then
  return missing('held', tonumber(free_in[first_missing]))
end
-- Joins every queue in this one step; a batch that lost its place in one
-- (its instance was away too long) joins them all again at the end, so
-- that batches keep one order across their queues.
local now = now_ms(lock_at(1))
local rejoin = joined > 0 and missing_from_a_queue
for i = 1, n do
  local ctx = lock_at(i)
  if rejoin and redis.call('ZSCORE', ctx.queue, waiter_id) then
    dequeue(ctx, waiter_id, waiter_entry(ctx, waiter_id))
  end
  if not redis.call('ZSCORE', ctx.queue, waiter_id) then
    local mode, limit, permits = wanted(i)
    enqueue(ctx, {id = waiter_id, inst = instance, token = token, mode = mode, limit = limit,
      permits = permits, ttl = ttl, since = now, deadline = now + wait_ms, batch = 1,
      value = value or false, session = session or false})
  end
  if ready[i] and not rejoin then
    -- At the head, with a place: nobody need tell it so.
    redis.call('HSET', ctx.waiters, '!' .. waiter_id, 1)
  else
    redis.call('HDEL', ctx.waiters, '!' .. waiter_id)
  end
end
return missing('queued', table.concat(free_in, ','))
