-- fleet_format.lua: changes the data format in use (a raise or a lower),
-- only when every live instance can write the new one, and records the
-- change; every instance is told on the channel <prefix>meta.
--
-- KEYS[1]  meta  <prefix>meta (see fleet_beat.lua), read through lib/fleet.lua
-- ARGV[1]  the format to change to
-- ARGV[2]  the format it must be now, or '' for any (a change decided on
--          what was read before)
-- ARGV[3]  how long a record stands without a beat, in milliseconds
-- ARGV[4]  who changes it (`0.2.0 (host:8080)`, `lockgate format raise`)
-- ARGV[5]  how: `raise`, `lower`, `automatic raise`
-- ARGV[6]  the channel to tell (<prefix>meta: a plain channel, which every
--          node of a Redis Cluster relays)
--
-- Returns {code, field, value, ...}, by code:
--   changed  from, to
--   same     the format is that already: format
--   moved    the format is not ARGV[2] any more: format
--   refused  a live instance cannot write it: instance (its id), writes
--            (`<min>..<max>`), version

-- The migrations kept: the last ones, so that beats read a bounded field.
local KEPT = 100

local meta = KEYS[1]
local target, expected, stale_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local by, how = ARGV[4], ARGV[5]
local seconds, micros = unpack(redis.call('TIME'))
local now = tonumber(seconds) * 1000 + math.floor(tonumber(micros) / 1000)

local current = fleet_format(redis.call('HGET', meta, 'format') or '1')
if current == target then
  return {'same', 'format', current}
end
if expected and current ~= expected then
  return {'moved', 'format', current}
end
local all = redis.call('HGETALL', meta)
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'i:' then
    local fields = fleet_record(all[i + 1])
    if fields and fields.seen_at_ms + stale_ms >= now
        and (target < fields.writes[1] or target > fields.writes[2]) then
      return {'refused', 'instance', fields.id, 'version', fields.version,
        'writes', fields.writes[1] .. '..' .. fields.writes[2]}
    end
  end
end
local ok, migrations = pcall(cjson.decode, redis.call('HGET', meta, 'migrations') or '[]')
if not ok or type(migrations) ~= 'table' then
  migrations = {}
end
migrations[#migrations + 1] = {from = current, to = target, at_ms = now, by = by, how = how}
while #migrations > KEPT do
  table.remove(migrations, 1)
end
redis.call('HSET', meta, 'format', target, 'migrations', cjson.encode(migrations))
redis.call('PUBLISH', ARGV[6], tostring(target))
return {'changed', 'from', current, 'to', target}
