-- reset_sale.lua: create a sale, or reset one to new stock and limit.
--
-- KEYS[1]  sale hash          <prefix>sale:{<sku>}
-- KEYS[2]  bought per user    <prefix>sale:{<sku>}:users
-- KEYS[3]  idempotency keys   <prefix>sale:{<sku>}:idem
-- KEYS[4]  order stream       <prefix>sale:{<sku>}:orders
-- KEYS[5]  orders per user    <prefix>sale:{<sku>}:by-user
-- ARGV[1]  stock
-- ARGV[2]  per_user_limit
-- ARGV[3]  the channel told of resets (every instance drops its sold-out flag)
-- ARGV[4]  the sku, as the message
--
-- Returns {code, field, value}:
--   reset  epoch (the new one: the Redis clock in ms, and always more than
--          the old sale's, so an epoch never goes back, not even after the
--          sale's keys were lost and it is created again)
-- The old sale's orders, per-user counts and idempotency records go with it.

local sale, users, idem, orders, by_user = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local stock, limit = tonumber(ARGV[1]), tonumber(ARGV[2])

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local epoch = math.max(tonumber(redis.call('HGET', sale, 'epoch') or '0') + 1, now_ms)
redis.call('UNLINK', users, idem, orders, by_user)
redis.call('HSET', sale, 'stock', stock, 'initial_stock', stock, 'sold', 0,
  'per_user_limit', limit, 'epoch', epoch, 'orders', 0)
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. epoch)
return {'reset', 'epoch', epoch}
