-- segment_settle.lua: the end of a transfer of stock between two segments of one sale: the donor forgets the units it sent, once the receiver took them.
--
-- KEYS[1]  donor segment hash
-- KEYS[2]  donor's transfers   ...:moving-out
-- ARGV[1]  transfer id
--
-- Returns {code, field, value}:
--   settled  units (0 when the transfer was settled before, or is unknown)
-- Run only after segment_take.lua answered taken (or stale) for the same
-- transfer: from then on the units are counted in the receiver's stock,
-- and no longer in the donor's `moving`.

local sale, moving_out = KEYS[1], KEYS[2]
local recorded = redis.call('HGET', moving_out, ARGV[1])
if not recorded then
  return {'settled', 'units', 0}
end
local units = tonumber(string.match(recorded, '^(%d+)|'))
redis.call('HDEL', moving_out, ARGV[1])
redis.call('HINCRBY', sale, 'moving', -units)
return {'settled', 'units', units}
