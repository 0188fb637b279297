-- reset_sale.lua: create a sale, or reset one to new stock and limit.
--
-- KEYS[1]  sale hash          <prefix>sale:{<sku>}
-- KEYS[2]  bought per user    <prefix>sale:{<sku>}:users
-- KEYS[3]  idempotency keys   <prefix>sale:{<sku>}:idem
-- KEYS[4]  order stream       <prefix>sale:{<sku>}:orders
-- KEYS[5]  orders per user    <prefix>sale:{<sku>}:by-user
-- KEYS[6]  draining streams   <prefix>sale:{<sku>}:draining  (old epochs' order streams
--                                                            the hand-off has not emptied)
-- ARGV[1]  stock
-- ARGV[2]  per_user_limit
-- ARGV[3]  the channel told of resets (every instance drops its sold-out flag)
-- ARGV[4]  the sku, as the message
-- ARGV[5]  the hand-off's consumer group
-- ARGV[6]  "1" when an order hand-off works on this Redis (a worker has
--          run here), so orders must be kept for it even before it joined
--          this sale's stream
--
-- Returns {code, field, value, ...}:
--   reset  epoch (the new one: the Redis clock in ms, and always more than
--          the old sale's, so an epoch never goes back, not even after the
--          sale's keys were lost and it is created again), kept (1 when the
--          old epoch's orders were kept for the hand-off, else 0), handoff
--          (1 when a hand-off reads the sale's orders, else 0)
-- The old sale's per-user counts and idempotency records go with it. Its
-- orders go too, unless a hand-off reads them (the stream has its consumer
-- group, or ARGV[6] says a hand-off works here) and some are still in the
-- stream: then the stream is renamed <orders>:<old epoch> (with the group,
-- made from its first entry when missing) and listed in KEYS[6], so the
-- hand-off stores the rest before it deletes it, and the new sale starts a
-- stream of its own, with the group.

local sale, users, idem, orders, by_user, draining =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local stock, limit, group = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[5]

local handed_off = false
if redis.call('EXISTS', orders) == 1 then
  for _, found in ipairs(redis.call('XINFO', 'GROUPS', orders)) do
    if found[2] == group then
      handed_off = true
    end
  end
end

local keep = handed_off or ARGV[6] == '1'
local old_epoch = redis.call('HGET', sale, 'epoch')
local kept = 0
if keep and old_epoch and redis.call('XLEN', orders) > 0 then
  local old = orders .. ':' .. old_epoch
  if not handed_off then
    redis.call('XGROUP', 'CREATE', orders, group, '0')
  end
  redis.call('RENAME', orders, old)
  redis.call('SADD', draining, old)
  kept = 1
end

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local epoch = math.max(tonumber(old_epoch or '0') + 1, now_ms)
redis.call('UNLINK', users, idem, orders, by_user)
redis.call('HSET', sale, 'stock', stock, 'initial_stock', stock, 'sold', 0,
  'per_user_limit', limit, 'epoch', epoch, 'orders', 0)
-- The refusals the instances counted were the old sale's.
redis.call('HDEL', sale, 'refused_sold_out', 'refused_limit_exceeded', 'refused_rate_limited')
if keep then
  -- The hand-off goes on with the new stream from its first order.
  redis.call('XGROUP', 'CREATE', orders, group, '0', 'MKSTREAM')
  redis.call('HSET', sale, 'stored', 0)
else
  redis.call('HDEL', sale, 'stored')
end
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. epoch)
return {'reset', 'epoch', epoch, 'kept', kept, 'handoff', keep and 1 or 0}
