-- orders_ack.lua: acknowledge orders the hand-off has stored, and count them.
--
-- KEYS[1]  an order stream (the sale's, or an old epoch's being drained)
-- KEYS[2]  sale hash          <prefix>sale:{<sku>}
-- ARGV[1]  the hand-off's consumer group
-- ARGV[2]  "1" when KEYS[1] is the sale's current stream (its stored count
--          is the sale's), else "0"
-- ARGV[3...] the ids of the stored entries
--
-- Returns {'acked', 'count', n}: n entries acknowledged now. Only those count as
-- stored: an entry acknowledged before (by a worker that then died, or one
-- whose stream a reset renamed since it was read) is not counted twice.

local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 3))
if ARGV[2] == '1' and acked > 0 and redis.call('HEXISTS', KEYS[2], 'stored') == 1 then
  redis.call('HINCRBY', KEYS[2], 'stored', acked)
end
return {'acked', 'count', acked}
