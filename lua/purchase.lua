-- purchase.lua: admit one flash-sale purchase, or replay a recorded one.
--
-- KEYS[1]  sale hash          <prefix>sale:{<sku>}         fields stock, initial_stock,
--                                                          sold, per_user_limit, epoch, orders
-- KEYS[2]  bought per user    <prefix>sale:{<sku>}:users   user_id -> quantity bought
-- KEYS[3]  idempotency keys   <prefix>sale:{<sku>}:idem    key -> order_id|user_id|quantity|stock_left
-- KEYS[4]  order stream       <prefix>sale:{<sku>}:orders   order_id, user_id, quantity,
--                                                          idempotency_key, epoch
-- KEYS[5]  orders per user    <prefix>sale:{<sku>}:by-user  user_id -> order_id:quantity,...
-- ARGV[1]  user_id
-- ARGV[2]  quantity (a positive integer)
-- ARGV[3]  the request's Idempotency-Key, or '' for none
-- ARGV[4]  the order id to use if an order is recorded
-- ARGV[5]  "replay" to only replay an order recorded under the key (a sale
--          this instance believes sold out: it buys nothing new), else "buy"
-- ARGV[6]  the sale's epoch as the gateway knows its segments, or '' (any):
--          a segment reset since (or not yet) answers stale-layout
-- With the buyer's lock, where one Redis holds it and the sale (a Redis
-- Cluster keeps it in a slot of its own): released here, by
-- lib/plain.lua (put before this file), once the answer is final,
-- instead of by a call of its own after the answer.
-- KEYS[6..8]  the lock's lock, queue and watch keys (lib/base.lua's)
-- ARGV[7]  PUBLISH
-- ARGV[8]  the lock's release channel, <prefix>released:{<key>}
-- ARGV[9]  the holder's token
-- ARGV[10] "1" when sold-out is a final answer (a sale of one segment;
--          with more, the caller moves stock over and runs this again)
--
-- Returns {code, field, value, ...}, by code:
--   ordered         stock and the user's count updated, order recorded:
--                   order_id, quantity, stock_left, epoch (the sale's)
--   replayed        the key was used before with the same user and
--                   quantity: the original order_id, quantity, stock_left;
--                   epoch
--   sold-out        not enough stock for quantity: stock, epoch
--   limit-exceeded  the user would exceed per_user_limit
--   no-sale         no such sale
--   key-reused      the key was used before for a different user or quantity
--   not-recorded    "replay", and no order is recorded under the key
--   stale-layout    ARGV[6] is not this segment's epoch: epoch
-- With the lock's keys, a final answer (any but no-sale, stale-layout, and
-- sold-out unless ARGV[10]) ends with field lock: release_plain.lua's code
-- (released or holds-left: the hold is given up; not-owner or busy:
-- nothing was done to the lock, and the caller releases it as it would
-- have).
-- Every check and change is this one script, so no interleaving of
-- requests on any number of gateways can oversell, exceed a cap, or record
-- an order twice.

local sale, users, idem, orders, by_user = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local user, quantity, key, order_id = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local replay_only = ARGV[5] == 'replay'

-- The reply, after the buyer's lock is released where it is final.
local function final(reply)
  if KEYS[6] then
    local released = plain_release(KEYS[6], KEYS[7], KEYS[8], ARGV[7], ARGV[8], ARGV[9], false, nil)
    reply[#reply + 1] = 'lock'
    reply[#reply + 1] = released[1]
  end
  return reply
end

local state = redis.call('HMGET', sale, 'stock', 'per_user_limit', 'epoch')
if not state[1] then
  return {'no-sale'}
end
local stock, limit, epoch = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
if ARGV[6] ~= '' and tonumber(ARGV[6]) ~= epoch then
  return {'stale-layout', 'epoch', epoch}
end

if key ~= '' then
  local recorded = redis.call('HGET', idem, key)
  if recorded then
    local id, by, qty, left = string.match(recorded, '^([^|]*)|([^|]*)|(%d+)|(%d+)$')
    if by == user and tonumber(qty) == quantity then
      -- Written again, unchanged: a write that replicates after the order
      -- it replays, so confirming this one (WAIT) confirms the order too.
      redis.call('HSET', idem, key, recorded)
      return final({'replayed', 'order_id', id, 'quantity', tonumber(qty),
        'stock_left', tonumber(left), 'epoch', epoch})
    end
    return final({'key-reused'})
  end
end
if replay_only then
  return final({'not-recorded'})
end

if stock < quantity then
  local reply = {'sold-out', 'stock', stock, 'epoch', epoch}
  return ARGV[10] == '1' and final(reply) or reply
end
local bought = tonumber(redis.call('HGET', users, user) or '0')
if bought + quantity > limit then
  return final({'limit-exceeded'})
end

local left = redis.call('HINCRBY', sale, 'stock', -quantity)
redis.call('HINCRBY', sale, 'sold', quantity)
redis.call('HINCRBY', sale, 'orders', 1)
redis.call('HINCRBY', users, user, quantity)
redis.call('XADD', orders, '*', 'order_id', order_id, 'user_id', user,
  'quantity', quantity, 'idempotency_key', key, 'epoch', epoch)
-- One user's orders, found without reading everyone's.
local mine = redis.call('HGET', by_user, user)
redis.call('HSET', by_user, user, (mine and mine .. ',' or '') .. order_id .. ':' .. quantity)
if key ~= '' then
  redis.call('HSET', idem, key, order_id .. '|' .. user .. '|' .. quantity .. '|' .. left)
end
return final({'ordered', 'order_id', order_id, 'quantity', quantity, 'stock_left', left,
  'epoch', epoch})
