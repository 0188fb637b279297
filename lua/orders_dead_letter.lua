-- orders_dead_letter.lua: move an order stream entry the hand-off could not
-- store, after its last delivery, to the sale's dead-letter stream.
--
-- KEYS[1]  the order stream
-- KEYS[2]  dead letters       <prefix>sale:{<sku>}:orders:dead
-- ARGV[1]  the hand-off's consumer group
-- ARGV[2]  the entry's id
-- ARGV[3]  why it could not be stored
-- ARGV[4...] the entry's fields and values
--
-- Both in one step: the entry is never acknowledged without its dead
-- letter, nor dead-lettered twice.
--
-- Returns {'dead-lettered', 'moved', 1}, or {'dead-lettered', 'moved', 0}
-- when it was no longer pending.

if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return {'dead-lettered', 'moved', 0}
end
redis.call('XADD', KEYS[2], '*', 'stream', KEYS[1], 'id', ARGV[2], 'reason', ARGV[3],
  unpack(ARGV, 4))
return {'dead-lettered', 'moved', 1}
