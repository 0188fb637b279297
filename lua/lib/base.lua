-- lib/base.lua: what every lock script starts from. The lock scripts are
-- this file, then lib/plain.lua, lib/events.lua, lib/holders.lua,
-- lib/modes.lua and lib/queue.lua, then the script's own file,
-- concatenated when the gateway loads them.
--
-- Every lock script takes the same keys, all of one lock (so all in one
-- Redis Cluster slot, by the hash tag {<key>}), and the same first three
-- arguments:
--
-- KEYS[1]  lock     <prefix>lock:{<key>}     the lock (lib/holders.lua)
-- KEYS[2]  fence    <prefix>fence:{<key>}    the last fencing token issued
-- KEYS[3]  holders  <prefix>holders:{<key>}  a lock with many holders
-- KEYS[4]  queue    <prefix>queue:{<key>}    the waiters, in arrival order
-- KEYS[5]  waiters  <prefix>waiters:{<key>}  what each waiter asked for
-- KEYS[6]  watch    <prefix>watch:{<key>}    while someone watches the lock
-- KEYS[7]  events   <prefix>events:{<key>}   the lock's event history
-- KEYS[8]  gone     <prefix>gone:{<key>}     streamed holders that released
-- ARGV[1]  PUBLISH, or SPUBLISH in a Redis Cluster
-- ARGV[2]  the key prefix (`lockgate:`), for the lock's channels
-- ARGV[3]  the lock's key (`orders:42`)
--
-- The lock's channels share its hash tag: <prefix>released:{<key>} (a
-- holder's place freed: the message is its fencing token, or `revoked`),
-- <prefix>granted:{<key>}:<instance> (a waiter of that instance granted)
-- and <prefix>events:{<key>} (each event, for the watchers).

-- The Redis clock, read once per script run (a second TIME would cost a
-- call and say nothing new): its seconds and microseconds.
local function clock(ctx)
  if not ctx.seconds then
    local time = redis.call('TIME')
    ctx.seconds, ctx.micros = tonumber(time[1]), tonumber(time[2])
  end
  return ctx.seconds, ctx.micros
end

-- The Redis clock, in Unix milliseconds.
local function now_ms(ctx)
  local seconds, micros = clock(ctx)
  return seconds * 1000 + math.floor(micros / 1000)
end

-- Whether anybody waits for or watches the lock: one call, answered for the
-- whole run, that spares a lock nobody waits for or watches two (see
-- `queued` and `watched`, which ask about each only when this says yes).
-- A script that starts a queue or a watch says so (`ctx.busy = true`).
local function busy(ctx)
  if ctx.busy == nil then
    ctx.busy = redis.call('EXISTS', ctx.queue, ctx.watch) > 0
  end
  return ctx.busy
end

-- The context of the run: one table, made once with the library and
-- filled anew by each run, so that a run leaves no garbage for it (Redis's
-- Lua collects garbage as scripts run: less made, less time spent).
local run_context = {}

-- The lock's keys, from the keys and arguments every lock script takes
-- (its KEYS and ARGV); what an earlier run noted (the clock, `busy`) is
-- forgotten.
local function context(keys, args)
  local ctx = run_context
  ctx.lock, ctx.fence, ctx.holders, ctx.queue = keys[1], keys[2], keys[3], keys[4]
  ctx.waiters, ctx.watch, ctx.events, ctx.gone = keys[5], keys[6], keys[7], keys[8]
  ctx.publish, ctx.prefix, ctx.key = args[1], args[2], args[3]
  ctx.seconds, ctx.micros, ctx.busy, ctx.batch = nil, nil, nil, nil
  ctx.cause = nil
  return ctx
end

-- The context of a plain try (acquire_plain.lua), which has only the lock
-- and its fence counter: enough for `now_ms` and `next_fence`.
local function plain_context(lock, fence)
  local ctx = run_context
  ctx.lock, ctx.fence = lock, fence
  ctx.seconds, ctx.micros, ctx.busy, ctx.batch = nil, nil, nil, nil
  return ctx
end

-- The lock's channel `name` (`released`, `events`, or `granted`, which
-- takes the instance's id after it): made when a message is sent, not for
-- every run.
local function channel(ctx, name)
  return ctx.prefix .. name .. ':{' .. ctx.key .. '}'
end

-- A JSON object from a list of {name, value} pairs, in that order. A
-- number is written whole (%d: cjson would round a fencing token), a
-- string quoted, false as null.
local function json(fields)
  local parts = {}
  for _, pair in ipairs(fields) do
    local name, value = pair[1], pair[2]
    local text
    if value == false or value == nil then
      text = 'null'
    elseif type(value) == 'number' then
      text = string.format('%d', value)
    elseif value == true then
      text = 'true'
    else
      text = cjson.encode(value)
    end
    parts[#parts + 1] = cjson.encode(name) .. ':' .. text
  end
  return '{' .. table.concat(parts, ',') .. '}'
end
