-- lib/queue.lua: the lock's waiters, served in arrival order across every
-- gateway instance.
--
-- queue    sorted set: waiter id -> its ticket (the arrival order)
-- waiters  hash: waiter id -> what it asked for (JSON: inst, token, mode,
--          limit, ttl, since, deadline, streamed, value, idem, body);
--          @<instance> -> that instance's presence deadline (Unix ms),
--          which it renews while it has waiters here; #seq -> the last
--          ticket
-- Both expire a while after the last wait could end.
--
-- A place that frees goes to the head of the queue (and, for a shared
-- lock, to every shared waiter next behind it; for a counting lock, to as
-- many as there are places), never to a newcomer while someone waits. A
-- waiter whose instance's presence lapsed (the instance died) or whose
-- wait is over is passed over and dropped. A waiter is granted its place
-- for at most OFFER_MS (or its lease, if shorter) and told on its
-- instance's grant channel; its instance then claims the place for the
-- whole lease (an extension). So a waiter whose instance died just before
-- its turn holds the lock a second at most.

local PRESENCE_MS = 1000
local OFFER_MS = 1000

-- Whether anybody waits.
local function queued(ctx)
  return busy(ctx) and redis.call('EXISTS', ctx.queue) == 1
end

-- Whether `instance` renewed its presence in time.
local function present(ctx, instance)
  local now = now_ms(ctx)
  return tonumber(redis.call('HGET', ctx.waiters, '@' .. instance) or '0') >= now
end

-- Renews `instance`'s presence: its waiters stay in the queue another
-- PRESENCE_MS.
local function renew_presence(ctx, instance)
  local now = now_ms(ctx)
  redis.call('HSET', ctx.waiters, '@' .. instance, now + PRESENCE_MS)
end

-- Removes waiter `id` from the queue; the keys go with the last waiter.
local function dequeue(ctx, id)
  redis.call('ZREM', ctx.queue, id)
  redis.call('HDEL', ctx.waiters, id)
  if redis.call('ZCARD', ctx.queue) == 0 then
    redis.call('DEL', ctx.queue, ctx.waiters)
  end
end

-- Puts `waiter` (a table as the waiters hash keeps it, with its id) at the
-- end of the queue; returns its position (1 is next).
local function enqueue(ctx, waiter)
  local now = now_ms(ctx)
  ctx.busy = true
  local ticket = redis.call('HINCRBY', ctx.waiters, '#seq', 1)
  redis.call('ZADD', ctx.queue, ticket, waiter.id)
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

-- The waiters in arrival order, with the ones whose instance is gone or
-- whose wait is over dropped; each a decoded entry with its id.
local function live_waiters(ctx)
  local now = now_ms(ctx)
  local live = {}
  for _, id in ipairs(redis.call('ZRANGE', ctx.queue, 0, -1)) do
    local entry = redis.call('HGET', ctx.waiters, id)
    local waiter = entry and cjson.decode(entry)
    if waiter and waiter.deadline >= now and present(ctx, waiter.inst) then
      waiter.id = id
      live[#live + 1] = waiter
    else
      dequeue(ctx, id)
    end
  end
  return live
end

-- Grants the places that are free to the waiters at the head of the
-- queue, in order, as long as each can be admitted; tells each one's
-- instance. `keep_ms`: how long a fence counter outlives a lease. Returns
-- how many were granted.
local function serve(ctx, keep_ms)
  local now = now_ms(ctx)
  local granted = 0
  while true do
    local head = redis.call('ZRANGE', ctx.queue, 0, 0)[1]
    if not head then
      return granted
    end
    local entry = redis.call('HGET', ctx.waiters, head)
    local waiter = entry and cjson.decode(entry)
    if not waiter or waiter.deadline < now or not present(ctx, waiter.inst) then
      dequeue(ctx, head)
    else
      local state = held(ctx)
      if not admits(state, waiter.mode, waiter.limit) then
        return granted
      end
      local lease = math.min(waiter.ttl, OFFER_MS)
      local place = {token = waiter.token, mode = waiter.mode, limit = waiter.limit,
        streamed = waiter.streamed == 1, value = waiter.value or false,
        idem = waiter.idem or false, body = waiter.body, offer = true}
      local fence, ends = grant_place(ctx, place, lease, keep_ms)
      dequeue(ctx, head)
      redis.call(ctx.publish, channel(ctx, 'granted') .. ':' .. waiter.inst,
        head .. ' ' .. string.format('%d', fence) .. ' ' .. string.format('%d', ends))
      granted = granted + 1
    end
  end
end

-- The lock as anyone may see it, never a token: its state (as held says,
-- with holds, the newest fence and the latest lease's end) and two JSON
-- lists: the leases (oldest grant first) and the live waiters (in order).
local function lock_view(ctx)
  local now = now_ms(ctx)
  local state = held(ctx)
  local leases = {}
  if state.kind == 'exclusive' then
    local lock = redis.call('HMGET', ctx.lock, 'fence', 'holds', 'value', 'at')
    state.fence, state.holds = tonumber(lock[1]), tonumber(lock[2])
    state.latest = redis.call('PEXPIRETIME', ctx.lock)
    leases[1] = {state.fence, json({{'fencing_token', state.fence}, {'value', lock[3] or false},
      {'holds', state.holds}, {'acquired_at_ms', tonumber(lock[4] or now)},
      {'expires_at_ms', state.latest}})}
  elseif state.kind ~= 'free' then
    local lock = redis.call('HMGET', ctx.lock, 'fence', 'holds')
    state.fence, state.holds = tonumber(lock[1]), tonumber(lock[2])
    local places = redis.call('ZRANGE', ctx.holders, 0, -1, 'WITHSCORES')
    for i = 1, #places, 2 do
      local token, ends = places[i], tonumber(places[i + 1])
      local fields = redis.call('HMGET', ctx.lock, 'f:' .. token, 'h:' .. token,
        'v:' .. token, 'a:' .. token)
      local fence = tonumber(fields[1])
      leases[#leases + 1] = {fence, json({{'fencing_token', fence}, {'value', fields[3] or false},
        {'holds', tonumber(fields[2])}, {'acquired_at_ms', tonumber(fields[4] or now)},
        {'expires_at_ms', ends}})}
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
