-- lib/base.lua: what every lock script starts from. The lock scripts are
-- this file, then lib/events.lua, lib/holders.lua and lib/queue.lua, then
-- the script's own file, concatenated when the gateway loads them.
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

-- The Redis clock, in Unix milliseconds.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The lock's keys and channels, from the arguments every lock script takes.
local function context()
  local prefix, key = ARGV[2], ARGV[3]
  return {
    lock = KEYS[1], fence = KEYS[2], holders = KEYS[3], queue = KEYS[4],
    waiters = KEYS[5], watch = KEYS[6], events = KEYS[7], gone = KEYS[8],
    publish = ARGV[1], key = key,
    released = prefix .. 'released:{' .. key .. '}',
    granted = prefix .. 'granted:{' .. key .. '}:',
    events_channel = prefix .. 'events:{' .. key .. '}',
  }
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
