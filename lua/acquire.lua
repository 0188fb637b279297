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
--
-- Returns {code, fencing_token, holds, ttl_ms, expires_at_ms}:
--   code  1  granted to a new owner (holds = 1, a new fencing token)
--   code  2  re-entered: holds + 1, lease reset, fencing token unchanged
--   code  0  held by others; ttl_ms is how long until the holder's lease
--            ends (the earliest lease, with many holders); holds is 1 when
--            the request was marked as a waiting writer
--   code -1  re-entry asked with a token that does not hold the lock
--   code -2  a counted lock holds the key: fencing_token is its limit
--   code -3  re-entry asked with a token that holds the lock shared
-- expires_at_ms is the lease's end in Unix ms; the fields a code does not
-- name are 0.

local lock, fence_key, holders, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, reenter = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local fence_retention, wait_ms, marked = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'

local state = redis.call('HMGET', lock, 'owner', 'mode')
local owner, mode = state[1], state[2]
if owner == token then
  local holds = redis.call('HINCRBY', lock, 'holds', 1)
  redis.call('PEXPIRE', lock, ttl)
  local fence = tonumber(redis.call('HGET', lock, 'fence'))
  return {2, fence, holds, ttl, redis.call('PEXPIRETIME', lock)}
end
if owner then
  local code = reenter and -1 or 0
  return {code, 0, 0, redis.call('PTTL', lock), 0}
end
if mode then
  local now = now_ms()
  if drop_ended(lock, holders, now) > 0 then
    if mode == 'counted' then
      return {-2, tonumber(redis.call('HGET', lock, 'limit')), 0, 0, 0}
    end
    if reenter then
      local shared = redis.call('HEXISTS', lock, 'h:' .. token) == 1
      return {shared and -3 or -1, 0, 0, 0, 0}
    end
    local writer = 0
    if wait_ms > 0 then
      mark_writer(writers, token, now, wait_ms)
      writer = 1
    end
    return {0, 0, writer, earliest_end(holders) - now, 0}
  end
end
if reenter then
  return {-1, 0, 0, 0, 0}
end

local fence, fence_text = next_fence(fence_key, ttl + fence_retention)
redis.call('HSET', lock, 'owner', token, 'holds', 1, 'fence', fence_text)
redis.call('PEXPIRE', lock, ttl)
if marked then
  redis.call('ZREM', writers, token)
end
return {1, fence, 1, ttl, redis.call('PEXPIRETIME', lock)}
