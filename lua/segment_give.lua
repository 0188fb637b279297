-- segment_give.lua: the first half of a transfer of stock between two segments of one sale: the donor sends units.
--
-- KEYS[1]  donor segment hash   <prefix>sale-segment:{<sku>#<tag>} (or the sale's own hash)
-- KEYS[2]  donor's transfers    ...:moving-out  transfer id -> units|receiver index|Redis ms
-- ARGV[1]  transfer id (fresh per transfer; a retry uses the same)
-- ARGV[2]  units wanted (a positive integer)
-- ARGV[3]  the receiving segment's index
-- ARGV[4]  the sale's epoch as the gateway knows it
--
-- Returns {code, field, value, ...}:
--   sent   units (what left the donor's stock: up to what it had, 0 when
--          it had none); a retry of a transfer already sent answers the
--          units it sent then, and sends nothing more
--   stale  the donor's epoch is not ARGV[4] (reset since): nothing sent
-- The units leave `stock` and wait in `moving` until the donor settles
-- the transfer (segment_settle.lua), after the receiver took them
-- (segment_take.lua). A gateway that dies between the halves leaves the
-- record here, which any gateway finishes (the take is idempotent), so
-- no unit is lost and none is counted twice.

local sale, moving_out = KEYS[1], KEYS[2]
local id, wanted, receiver = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local state = redis.call('HMGET', sale, 'stock', 'epoch')
if not state[1] or tonumber(state[2]) ~= tonumber(ARGV[4]) then
  return {'stale'}
end
local recorded = redis.call('HGET', moving_out, id)
if recorded then
  return {'sent', 'units', tonumber(string.match(recorded, '^(%d+)|'))}
end
local units = math.min(tonumber(state[1]), wanted)
if units <= 0 then
  return {'sent', 'units', 0}
end
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('HINCRBY', sale, 'stock', -units)
redis.call('HINCRBY', sale, 'moving', units)
redis.call('HSET', moving_out, id, units .. '|' .. receiver .. '|' .. now_ms)
return {'sent', 'units', units}
