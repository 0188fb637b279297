-- reset_sale.lua: create a sale, or reset one to new stock and limit.
--
-- KEYS[1]  sale hash          <prefix>sale:{<sku>}
-- KEYS[2]  bought per user    <prefix>sale:{<sku>}:users
-- KEYS[3]  idempotency keys   <prefix>sale:{<sku>}:idem
-- KEYS[4]  order stream       <prefix>sale:{<sku>}:orders
-- KEYS[5]  orders per user    <prefix>sale:{<sku>}:by-user
-- KEYS[6]  draining streams   <prefix>sale:{<sku>}:draining  (old epochs' order streams
--                                                            the hand-off has not emptied)
-- KEYS[7]  transfers out      <prefix>sale:{<sku>}:moving-out  (segments: stock sent, not settled)
-- KEYS[8]  transfers in       <prefix>sale:{<sku>}:moved-in    (segments: transfers received)
-- ARGV[1]  stock
-- ARGV[2]  per_user_limit
-- ARGV[3]  the channel told of resets (every instance drops its sold-out flag),
--          or '' to tell nobody (a segment other than the sale's first)
-- ARGV[4]  the sku, as the message
-- ARGV[5]  the hand-off's consumer group
-- ARGV[6]  "1" when an order hand-off works on this Redis (a worker has
--          run here), so orders must be kept for it even before it joined
--          this sale's stream
-- ARGV[7]  the new epoch, or '' to choose one (a segmented sale's segments
--          all take the epoch the gateway chose)
-- ARGV[8]  the sale's segments, "<count> <tag>,<tag>,..." (the first
--          segment's hash names them), or '' for none (one segment, or a
--          segment other than the first)
-- ARGV[9]  the sale's initial stock (all segments'); ARGV[1] is this
--          segment's share of it
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

local sale, users, idem, orders, by_user, draining, moving_out, moved_in =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local stock, limit, group = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[5]
-- (KEYS[7] and [8], ARGV[7] to [9] may be left out: a one-segment sale's
-- reset, as before segments.)
local initial = tonumber(ARGV[9]) or stock

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

local epoch = tonumber(ARGV[7])
if not epoch then
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  epoch = math.max(tonumber(old_epoch or '0') + 1, now_ms)
end
redis.call('UNLINK', users, idem, orders, by_user, moving_out or users, moved_in or users)
redis.call('HSET', sale, 'stock', stock, 'initial_stock', initial, 'sold', 0,
  'per_user_limit', limit, 'epoch', epoch, 'orders', 0, 'moving', 0)
if ARGV[8] and ARGV[8] ~= '' then
  local count, tags = string.match(ARGV[8], '^(%d+) (.*)$')
  redis.call('HSET', sale, 'segments', count, 'segment_tags', tags)
else
  redis.call('HDEL', sale, 'segments', 'segment_tags')
end
-- The refusals the instances counted were the old sale's.
redis.call('HDEL', sale, 'refused_sold_out', 'refused_limit_exceeded', 'refused_rate_limited')
if keep then
  -- The hand-off goes on with the new stream from its first order.
  redis.call('XGROUP', 'CREATE', orders, group, '0', 'MKSTREAM')
  redis.call('HSET', sale, 'stored', 0)
else
  redis.call('HDEL', sale, 'stored')
end
if ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. epoch)
end
return {'reset', 'epoch', epoch, 'kept', kept, 'handoff', keep and 1 or 0}
