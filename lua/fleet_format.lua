-- fleet_format.lua: changes the data format in use (a raise or a lower),
-- only when every live instance can write the new one, and records the
-- change; every instance is told on the channel <prefix>meta.
--
-- KEYS[1]  meta  <prefix>meta (see fleet_beat.lua)
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

-- As fleet_beat.lua reads them: a record that is not one is no live
-- instance, a field that is no format is format 0.
local function readable(text)
  local ok, fields = pcall(cjson.decode, text)
  if not ok or type(fields) ~= 'table' or type(fields.seen_at_ms) ~= 'number'
      or type(fields.writes) ~= 'table' or type(fields.writes[1]) ~= 'number'
      or type(fields.writes[2]) ~= 'number' then
    return nil
  end
  return fields
end

local function format_of(text)
  if text and string.match(text, '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
    return tonumber(text)
  end
  return 0
end

-- The migrations kept: the last ones, so that beats read a bounded field.
local KEPT = 100

local meta = KEYS[1]
local target, expected, stale_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local by, how = ARGV[4], ARGV[5]
local seconds, micros = unpack(redis.call('TIME'))
local now = tonumber(seconds) * 1000 + math.floor(tonumber(micros) / 1000)

local current = format_of(redis.call('HGET', meta, 'format') or '1')
if current == target then
  return {'same', 'format', current}
end
if expected and current ~= expected then
  return {'moved', 'format', current}
end
local all = redis.call('HGETALL', meta)
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'i:' then
    local fields = readable(all[i + 1])
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
