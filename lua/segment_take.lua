-- segment_take.lua: the second half of a transfer of stock between two segments of one sale: the receiver takes the units, once.
--
-- KEYS[1]  receiving segment hash   <prefix>sale-segment:{<sku>#<tag>} (or the sale's own hash)
-- KEYS[2]  receiver's transfers     ...:moved-in  transfer id -> units
-- ARGV[1]  transfer id
-- ARGV[2]  units (what segment_give.lua sent)
-- ARGV[3]  the sale's epoch
--
-- Returns {code}:
--   taken  the units are in the receiver's stock: now, or by an earlier
--          run of the same transfer (which this one does not repeat)
--   stale  the receiver's epoch is not ARGV[3] (the sale was reset: the
--          units were the old sale's)
-- The record of a transfer taken stays for the whole epoch (a reset
-- clears it): a late retry of the same transfer must still find it.

local sale, moved_in = KEYS[1], KEYS[2]
local id, units = ARGV[1], tonumber(ARGV[2])

local epoch = redis.call('HGET', sale, 'epoch')
if not epoch or tonumber(epoch) ~= tonumber(ARGV[3]) then
  return {'stale'}
end
if redis.call('HSETNX', moved_in, id, units) == 1 then
  redis.call('HINCRBY', sale, 'stock', units)
end
return {'taken'}
