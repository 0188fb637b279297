-- lib/queue.lua: the lock's waiters, served in arrival order across every
-- gateway instance.
--
-- queue    sorted set: waiter id -> its ticket (the arrival order)
-- waiters  hash: waiter id -> what it asked for (JSON: inst, token, mode,
--          limit, permits, ttl, since, deadline, streamed, value, idem,
--          body, session; batch, for a batch's waiter; upgrade, for a
--          shared holder waiting to become the exclusive one; one, for a
--          waiter whose instance takes a grant outright: format 2);
--          @<instance> -> that instance's presence deadline (Unix ms),
--          which it renews while it has waiters here; #seq -> the last
--          ticket; ~<idempotency key> -> the ids (space-separated, the
--          first request's first) of the requests waiting under that key;
--          ^upgrade -> the id of the holder waiting to upgrade (one at a
--          time); !<id> -> set once a batch's waiter was told that this
--          lock is ready for it
-- Both expire a while after the last wait could end.
--
-- A place that frees goes to the head of the queue (and, for a shared
-- lock, to every shared waiter next behind it; for a counting lock, to as
-- many as there are places), never to a newcomer while someone present
-- waits. A waiter whose instance's presence lapsed (a pause, a stall, or
-- a death) is passed over but keeps its place: when its instance is back
-- (it renews its presence), so is the waiter, at its ticket. An instance
-- away for AWAY_MS is taken for dead, and its waiters lose their places,
-- as does a waiter whose wait is over.
--
-- A place goes to a waiter in one write (data format 2) when its entry
-- says its instance takes a grant outright (`one`) and that instance
-- renewed its presence within FRESH_MS: the waiter is granted its whole
-- lease, and told on its instance's grant channel, which answers its
-- client without writing. Any other waiter is offered the place for at
-- most OFFER_MS (or its lease, if shorter) and told; its instance then
-- claims the place for the whole lease (an extension: the two-step
-- hand-off, all format 1 has). So a waiter whose instance died just
-- before its turn holds the lock for its lease if the instance died less
-- than FRESH_MS before the grant, and a second at most otherwise.
--
-- Requests with the same Idempotency-Key (a client's retry, through
-- another instance, while its first request still waits) wait as one:
-- the retry takes the first request's ticket and token, and the grant
-- goes to all of them at once, so one key never makes two grants.
--
-- A batch (several locks at once, on one Redis) waits in the queue of
-- each of its locks, having joined them all in one step, so any two
-- batches stand in the same order in every queue they share: none waits
-- for another in a circle. At the head of a queue with a place for it, a
-- batch's waiter is not offered the place (it takes all its locks itself,
-- in one step, when each has a place for it); its instance is told the
-- lock is ready, and nobody behind it goes first.
--
-- A shared holder waiting to upgrade waits at ticket 0, ahead of everyone:
-- it holds its place, so an exclusive waiter ahead of it would wait for it
-- while it waits for that waiter.

local PRESENCE_MS = 1000
local AWAY_MS = 10000
local OFFER_MS = 1000
local FRESH_MS = 500

-- Whether anybody waits.
local function queued(ctx)
  return busy(ctx) and redis.call('EXISTS', ctx.queue) == 1
end

-- Where a waiter stands for the queue: 'here' (it may be granted; and
-- its instance's presence deadline), 'away' (its instance's presence
-- lapsed less than AWAY_MS ago: passed over, keeping its place) or 'gone'
-- (its wait is over, or its instance has been away too long: dropped).
local function standing(ctx, waiter)
  local now = now_ms(ctx)
  if not waiter or waiter.deadline < now then
    return 'gone'
  end
  local presence = tonumber(redis.call('HGET', ctx.waiters, '@' .. waiter.inst) or '0')
  if presence >= now then
    return 'here', presence
  end
  if presence + AWAY_MS >= now then
    return 'away'
  end
  return 'gone'
end

-- The waiter `id` as the waiters hash keeps it, decoded, with its id.
local function waiter_entry(ctx, id)
  local entry = redis.call('HGET', ctx.waiters, id)
  local waiter = entry and cjson.decode(entry)
  if waiter then
    waiter.id = id
  end
  return waiter
end

-- Renews `instance`'s presence: its waiters stay in the queue another
-- PRESENCE_MS.
local function renew_presence(ctx, instance)
  local now = now_ms(ctx)
  redis.call('HSET', ctx.waiters, '@' .. instance, now + PRESENCE_MS)
end

-- The ids of the requests waiting under Idempotency-Key `idem`, the
-- first request's first.
local function waiting_under(ctx, idem)
  local ids = {}
  for id in string.gmatch(redis.call('HGET', ctx.waiters, '~' .. idem) or '', '%S+') do
    ids[#ids + 1] = id
  end
  return ids
end

-- Removes waiter `id` (`waiter`: its entry, if known) from the queue; the
-- keys go with the last waiter.
local function dequeue(ctx, id, waiter)
  redis.call('ZREM', ctx.queue, id)
  redis.call('HDEL', ctx.waiters, id)
  if waiter and waiter.batch then
    redis.call('HDEL', ctx.waiters, '!' .. id)
  end
  if waiter and waiter.upgrade then
    redis.call('HDEL', ctx.waiters, '^upgrade')
  end
  if waiter and waiter.idem then
    local left = {}
    for _, other in ipairs(waiting_under(ctx, waiter.idem)) do
      if other ~= id then
        left[#left + 1] = other
      end
    end
    if #left > 0 then
      redis.call('HSET', ctx.waiters, '~' .. waiter.idem, table.concat(left, ' '))
    else
      redis.call('HDEL', ctx.waiters, '~' .. waiter.idem)
    end
  end
  if redis.call('ZCARD', ctx.queue) == 0 then
    redis.call('DEL', ctx.queue, ctx.waiters)
  end
end

-- Puts `waiter` (a table as the waiters hash keeps it, with its id) in the
-- queue, at `ticket` (a retry under an Idempotency-Key takes its first
-- request's) or else at the end; returns its position (1 is next).
local function enqueue(ctx, waiter, ticket)
  local now = now_ms(ctx)
  ctx.busy = true
  ticket = ticket or redis.call('HINCRBY', ctx.waiters, '#seq', 1)
  redis.call('ZADD', ctx.queue, ticket, waiter.id)
  if waiter.idem then
    local ids = redis.call('HGET', ctx.waiters, '~' .. waiter.idem)
    redis.call('HSET', ctx.waiters, '~' .. waiter.idem, ids and (ids .. ' ' .. waiter.id) or waiter.id)
  end
  redis.call('HSET', ctx.waiters, waiter.id, cjson.encode(waiter))
  renew_presence(ctx, waiter.inst)
  -- Kept until the last wait could end, and a presence beyond.
  local keep = waiter.deadline - now + PRESENCE_MS
  for _, key in ipairs({ctx.queue, ctx.waiters}) do
    if redis.call('PTTL', key) < keep then
      redis.call('PEXPIRE', key, keep)
    end
  end
  return redis.call('ZRANK', ctx.queue, waiter.id) + 1
end

-- The waiters that may be served now, in arrival order (those whose
-- instance is away are passed over; the gone are dropped); each a
-- decoded entry with its id.
local function live_waiters(ctx)
  local live = {}
  for _, id in ipairs(redis.call('ZRANGE', ctx.queue, 0, -1)) do
    local waiter = waiter_entry(ctx, id)
    local now_standing = standing(ctx, waiter)
    if now_standing == 'here' then
      live[#live + 1] = waiter
    elseif now_standing == 'gone' then
      dequeue(ctx, id, waiter)
    end
  end
  return live
end

-- Tells waiter `waiter` (an entry with its id) on its instance's grant
-- channel that it was granted a place: its fencing token and the grant's
-- end, then `outright` when the grant is for its whole lease and its
-- instance takes it so (else it is an offer, to claim), then, when the run
-- was traced (`ctx.cause`, a release's traceparent), the span of the
-- request that freed the place.
local function tell_granted(ctx, waiter, fence, ends, outright)
  local message = waiter.id .. ' ' .. string.format('%d', fence) .. ' ' .. string.format('%d', ends)
  if outright and waiter.one == 1 then
    message = message .. ' outright'
  end
  if ctx.cause then
    message = message .. ' ' .. ctx.cause
  end
  redis.call(ctx.publish, channel(ctx, 'granted') .. ':' .. waiter.inst, message)
end

-- Grants `waiter` (an entry with its id) a place: its whole lease when
-- `outright`, else an offer, to claim; and takes it (and the requests
-- waiting under its Idempotency-Key, which share its token and so its
-- grant) out of the queue.
local function offer(ctx, waiter, keep_ms, outright)
  local lease = outright and waiter.ttl or math.min(waiter.ttl, OFFER_MS)
  local place = {token = waiter.token, mode = waiter.mode, limit = waiter.limit,
    permits = waiter.permits or 1, streamed = waiter.streamed == 1, value = waiter.value or false,
    idem = waiter.idem or false, body = waiter.body, offer = not outright,
    session = waiter.session or false}
  local fence, ends = grant_place(ctx, place, lease, keep_ms)
  if waiter.idem then
    for _, id in ipairs(waiting_under(ctx, waiter.idem)) do
      local twin = id ~= waiter.id and waiter_entry(ctx, id)
      if twin then
        tell_granted(ctx, twin, fence, ends, outright)
        dequeue(ctx, id, twin)
      end
    end
  end
  tell_granted(ctx, waiter, fence, ends, outright)
  dequeue(ctx, waiter.id, waiter)
end

-- Tells a batch's waiter's instance, once, that this lock has a place for
-- it (the batch then tries all its locks again). Not the batch whose own
-- request is running.
local function tell_ready(ctx, waiter)
  if waiter.id ~= ctx.batch and redis.call('HSETNX', ctx.waiters, '!' .. waiter.id, 1) == 1 then
    redis.call(ctx.publish, channel(ctx, 'granted') .. ':' .. waiter.inst, waiter.id .. ' ready')
  end
end

-- Serves the holder waiting at the head to upgrade: granted once it is the
-- only holder. Returns whether it was, or nil when it must wait on.
local function serve_upgrade(ctx, waiter, keep_ms)
  local place = holder(ctx, waiter.token)
  if place and not place.plain then
    if held(ctx).count > 1 then
      return nil
    end
    local fence, ends = upgrade_place(ctx, waiter.token, place, keep_ms)
    tell_granted(ctx, waiter, fence, ends)
  end
  -- Granted, or (it let go meanwhile) nothing to wait for: its request
  -- finds out when it asks.
  dequeue(ctx, waiter.id, waiter)
  return place ~= nil
end

-- Grants the places that are free to the waiters at the head of the
-- queue, in order, as long as each can be admitted (passing over those
-- whose instance is away, which keep their places); tells each one's
-- instance. `keep_ms`: how long a fence counter outlives a lease. Returns
-- how many were granted, and whether a waiter that may be served now is
-- still waiting (no newcomer may then take a place before it).
local function serve(ctx, keep_ms)
  local granted, index = 0, 0
  while true do
    local head = redis.call('ZRANGE', ctx.queue, index, index)[1]
    if not head then
      return granted, false
    end
    local waiter = waiter_entry(ctx, head)
    local now_standing, presence = standing(ctx, waiter)
    if now_standing == 'gone' then
      dequeue(ctx, head, waiter)
    elseif now_standing == 'away' then
      index = index + 1
    elseif waiter.upgrade then
      local upgraded = serve_upgrade(ctx, waiter, keep_ms)
      if upgraded == nil then
        return granted, true
      end
      if upgraded then
        granted = granted + 1
      end
      index = 0
    elseif not admits(held(ctx), waiter.mode, waiter.limit, waiter.permits) then
      return granted, true
    elseif waiter.batch then
      tell_ready(ctx, waiter)
      return granted, true
    else
      -- In one write only to an instance heard from a moment ago: one
      -- that died just before holds the place for its lease.
      local outright = waiter.one == 1 and presence >= now_ms(ctx) + PRESENCE_MS - FRESH_MS
      offer(ctx, waiter, keep_ms, outright)
      granted = granted + 1
      -- The offer took the waiters under its key out too, wherever they
      -- stood: the passed-over are counted again from the head.
      index = 0
    end
  end
end

-- The lock as anyone may see it, never a token: its state (as held says,
-- with holds, the newest fence and the latest lease's end) and two JSON
-- lists: the leases (oldest grant first; a session's holder names its
-- session's public handle, and its lease is the session's) and the live
-- waiters (in order).
local function lock_view(ctx)
  local now = now_ms(ctx)
  local state = held(ctx)
  local leases = {}
  local session_of_record = function(record)
    return record and string.match(record, '^(%S+)') or false
  end
  if state.kind == 'exclusive' then
    local lock = redis.call('HMGET', ctx.lock, 'fence', 'holds', 'value', 'at', 'session')
    state.fence, state.holds = tonumber(lock[1]), tonumber(lock[2])
    state.latest = redis.call('PEXPIRETIME', ctx.lock)
    leases[1] = {state.fence, json({{'fencing_token', state.fence}, {'value', lock[3] or false},
      {'holds', state.holds}, {'acquired_at_ms', tonumber(lock[4] or now)},
      {'expires_at_ms', state.latest}, {'session', session_of_record(lock[5])}})}
  elseif state.kind ~= 'free' and state.kind ~= 'delayed' then
    local lock = redis.call('HMGET', ctx.lock, 'fence', 'holds')
    state.fence, state.holds = tonumber(lock[1]), tonumber(lock[2])
    local places = redis.call('ZRANGE', ctx.holders, 0, -1, 'WITHSCORES')
    for i = 1, #places, 2 do
      local token, ends = places[i], tonumber(places[i + 1])
      local fields = redis.call('HMGET', ctx.lock, 'f:' .. token, 'h:' .. token,
        'v:' .. token, 'a:' .. token, 'e:' .. token, 'p:' .. token)
      local fence = tonumber(fields[1])
      local lease = {{'fencing_token', fence}, {'value', fields[3] or false},
        {'holds', tonumber(fields[2])}, {'acquired_at_ms', tonumber(fields[4] or now)},
        {'expires_at_ms', ends}, {'session', session_of_record(fields[5])}}
      if state.kind == 'counted' then
        lease[#lease + 1] = {'permits', tonumber(fields[6] or '1')}
      end
      leases[#leases + 1] = {fence, json(lease)}
      state.latest = ends
    end
  end
  table.sort(leases, function(a, b) return a[1] < b[1] end)
  local lease_list = {}
  for i, lease in ipairs(leases) do
    lease_list[i] = lease[2]
  end
  local waiter_list = {}
  for position, waiter in ipairs(live_waiters(ctx)) do
    waiter_list[position] = json({{'position', position}, {'mode', waiter.mode},
      {'waiting_since_ms', waiter.since}})
  end
  return state, '[' .. table.concat(lease_list, ',') .. ']',
    '[' .. table.concat(waiter_list, ',') .. ']'
end
