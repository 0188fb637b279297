-- acquire.lua: take a plain lock (exclusive, one place) for a new owner, or
-- re-enter it for its holder. (After lib/holders.lua.)
--
-- KEYS[1]  lock hash      <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  fence counter  <prefix>fence:{<key>}    the last fencing token issued
-- KEYS[3]  holders        <prefix>holders:{<key>}  of a lock with many holders
-- KEYS[4]  writers        <prefix>writers:{<key>}  exclusive requests waiting
-- ARGV[1]  token: a fresh owner token, or the holder's own when re-entering
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" when the client asks to re-enter with its token, else "0"
-- ARGV[4]  how long the fence counter outlives the lease, in milliseconds
-- ARGV[5]  how long this request may still wait, in milliseconds: when it is
--          refused because shared holders have the lock, it is marked as a
--          waiting writer for that long (0: it does not wait, no mark)
-- ARGV[6]  "1" when an earlier attempt of this request left that mark (the
--          grant removes it), else "0"
-- ARGV[7]  "1" when the grant is a streamed lock's (its release is noted in
--          the gone hash, see lib/holders.lua), else "0"
--
-- Returns {code, field, value, ...}, by code:
--   granted         a new owner: fence (a new fencing token), holds (1),
--                   ttl_ms, expires_at_ms (the lease's end, Unix ms), room
--                   (0: a plain lock admits nobody else)
--   reentered       fence (unchanged), holds (one more), ttl_ms,
--                   expires_at_ms (the lease reset)
--   held            held by others: remaining_ms (until the holder's lease,
--                   the earliest with many holders, ends), marked (1 when
--                   the request was marked as a waiting writer, else 0),
--                   behind_writer (0)
--   not-owner       re-entry asked with a token that does not hold the lock
--   limit-mismatch  a counted lock holds the key: limit (its places)
--   mode-conflict   re-entry asked with a token that holds the lock shared

local lock, fence_key, holders, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, reenter = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local fence_retention, wait_ms, marked = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local streamed = ARGV[7] == '1'

local state = redis.call('HMGET', lock, 'owner', 'mode')
local owner, mode = state[1], state[2]
if owner == token then
  local holds = redis.call('HINCRBY', lock, 'holds', 1)
  redis.call('PEXPIRE', lock, ttl)
  local fence = tonumber(redis.call('HGET', lock, 'fence'))
  return {'reentered', 'fence', fence, 'holds', holds, 'ttl_ms', ttl,
    'expires_at_ms', redis.call('PEXPIRETIME', lock)}
end
if owner then
  if reenter then
    return {'not-owner'}
  end
  return {'held', 'remaining_ms', redis.call('PTTL', lock), 'marked', 0, 'behind_writer', 0}
end
if mode then
  local now = now_ms()
  if drop_ended(lock, holders, now) > 0 then
    if mode == 'counted' then
      return {'limit-mismatch', 'limit', tonumber(redis.call('HGET', lock, 'limit'))}
    end
    if reenter then
      local shared = redis.call('HEXISTS', lock, 'h:' .. token) == 1
      return {shared and 'mode-conflict' or 'not-owner'}
    end
    local writer = 0
    if wait_ms > 0 then
      mark_writer(writers, token, now, wait_ms)
      writer = 1
    end
    return {'held', 'remaining_ms', earliest_end(holders) - now, 'marked', writer,
      'behind_writer', 0}
  end
end
if reenter then
  return {'not-owner'}
end

local fence, fence_text = next_fence(fence_key, ttl + fence_retention)
if streamed then
  redis.call('HSET', lock, 'owner', token, 'holds', 1, 'fence', fence_text, 'streamed', 1)
else
  redis.call('HSET', lock, 'owner', token, 'holds', 1, 'fence', fence_text)
end
redis.call('PEXPIRE', lock, ttl)
if marked then
  redis.call('ZREM', writers, token)
end
return {'granted', 'fence', fence, 'holds', 1, 'ttl_ms', ttl,
  'expires_at_ms', redis.call('PEXPIRETIME', lock), 'room', 0}
