-- fleet_libraries.lua: notes the function libraries that are loaded but
-- that no live instance names, and answers those seen so for longer than
-- the grace: the caller deletes them (FUNCTION DELETE, which no script may
-- run). A library named again is no longer counted.
--
-- KEYS[1]  meta  <prefix>meta (see fleet_beat.lua): l:<library> fields
-- ARGV[1]  the libraries loaded that no live instance names, space-separated
-- ARGV[2]  the grace, in milliseconds
--
-- Returns {code, field, value, ...}, by code:
--   noted  due (the libraries unnamed for longer than the grace,
--          space-separated; their fields dropped), unnamed (how many are
--          unnamed now)

local meta, grace = KEYS[1], tonumber(ARGV[2])
local seconds, micros = unpack(redis.call('TIME'))
local now = tonumber(seconds) * 1000 + math.floor(tonumber(micros) / 1000)

local unnamed, count = {}, 0
for name in string.gmatch(ARGV[1], '%S+') do
  unnamed[name] = true
  count = count + 1
end
local due, noted = {}, {}
local all = redis.call('HGETALL', meta)
for i = 1, #all, 2 do
  local name = string.match(all[i], '^l:(.*)$')
  if name then
    noted[name] = true
    if not unnamed[name] or tonumber(all[i + 1]) + grace <= now then
      redis.call('HDEL', meta, all[i])
      if unnamed[name] then
        due[#due + 1] = name
      end
    end
  end
end
for name in pairs(unnamed) do
  if not noted[name] then
    redis.call('HSET', meta, 'l:' .. name, now)
  end
end
return {'noted', 'due', table.concat(due, ' '), 'unnamed', count}
