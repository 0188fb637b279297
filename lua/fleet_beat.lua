-- fleet_beat.lua: an instance's heartbeat in the fleet's record, and the
-- fleet as it stands: the data format in use, its migrations, and every
-- live instance. Also what an operator's `lockgate format status` reads
-- (then with no instance of its own).
--
-- KEYS[1]  meta  <prefix>meta  a hash: format (the data format in use),
--                migrations (a JSON list of every change of it: from, to,
--                at_ms, by, how), i:<instance> (a live instance's record,
--                JSON, with the Redis time of its last beat as seen_at_ms),
--                l:<library> (since when a loaded function library nobody
--                names has been seen so: see fleet_libraries.lua)
-- ARGV[1]  the instance's key in the fleet (its waiting-room id, fresh per
--          start), or '' to read only
-- ARGV[2]  its record, JSON (id, version, reads, writes, started_at_ms,
--          address, library)
-- ARGV[3]  how long a record stands without a beat, in milliseconds
-- ARGV[4]  the format a Redis with no format recorded is taken to hold
--          (1: what 0.1.0, which kept no record, wrote), and the version
--          that records it, after a space
--
-- Returns {code, field, value, ...}, by code:
--   fleet  format (0: the field holds no format), migrations (JSON list;
--          [] when the field is not JSON), instances (JSON list of the live
--          records), now_ms

local meta = KEYS[1]
local instance, record, stale_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local first_format, first_by = string.match(ARGV[4], '^(%d+) (.*)$')
local seconds, micros = unpack(redis.call('TIME'))
local now = tonumber(seconds) * 1000 + math.floor(tonumber(micros) / 1000)

if redis.call('HSETNX', meta, 'format', first_format) == 1 then
  local first = {{from = cjson.null, to = tonumber(first_format), at_ms = now, by = first_by,
    how = 'first recorded'}}
  redis.call('HSET', meta, 'migrations', cjson.encode(first))
end
if instance ~= '' then
  local fields = cjson.decode(record)
  fields.seen_at_ms = now
  redis.call('HSET', meta, 'i:' .. instance, cjson.encode(fields))
end

-- The live records; the stale ones go (an instance that stopped beating).
local all = redis.call('HGETALL', meta)
local live = {}
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'i:' then
    local fields = fleet_record(all[i + 1])
    if not fields or fields.seen_at_ms + stale_ms < now then
      redis.call('HDEL', meta, all[i])
    else
      live[#live + 1] = all[i + 1]
    end
  end
end
local state = redis.call('HMGET', meta, 'format', 'migrations')
local migrations = state[2] or '[]'
if not pcall(cjson.decode, migrations) then
  migrations = '[]'
end
return {'fleet', 'format', fleet_format(state[1]), 'migrations', migrations,
  'instances', '[' .. table.concat(live, ',') .. ']', 'now_ms', now}
