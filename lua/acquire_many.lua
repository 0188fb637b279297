-- acquire_many.lua: take a place in a lock with many holders, shared (any
-- number of readers) or counted (up to `limit` holders), or re-enter the
-- place a token holds. (After lib/holders.lua.)
--
-- KEYS[1]  lock hash      <prefix>lock:{<key>}     see lib/holders.lua
-- KEYS[2]  fence counter  <prefix>fence:{<key>}
-- KEYS[3]  holders        <prefix>holders:{<key>}
-- KEYS[4]  writers        <prefix>writers:{<key>}
-- ARGV[1]  token: a fresh one, or the holder's own when re-entering
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "1" when the client asks to re-enter with its token, else "0"
-- ARGV[4]  how long the fence counter outlives the lease, in milliseconds
-- ARGV[5]  "shared" or "counted"
-- ARGV[6]  the limit of a counted lock (2 or more); ignored when shared
-- ARGV[7]  how long this request may still wait, in milliseconds: a counted
--          request refused because shared holders have the lock is marked
--          as a waiting writer for that long (0: no mark)
-- ARGV[8]  "1" when an earlier attempt of this request left that mark (the
--          grant removes it), else "0"
-- ARGV[9]  "1" when the grant is a streamed lock's (its release is noted in
--          the gone hash, see lib/holders.lua), else "0"
--
-- Returns {code, field, value, ...}, by code:
--   granted         a new holder: fence (a new fencing token), holds (1),
--                   ttl_ms, expires_at_ms (its lease's end, Unix ms), room
--                   (1 when another request could be admitted now, else 0)
--   reentered       fence (the holder's, unchanged), holds (the holder's,
--                   one more), ttl_ms, expires_at_ms (its lease reset)
--   held            no place now: remaining_ms (until a place may free: the
--                   earliest lease end, or the earliest waiting writer's
--                   wait), marked (1 when the request was marked as a
--                   waiting writer), behind_writer (1 when nobody holds the
--                   key and only a waiting writer keeps this shared request
--                   out: that writer should be woken)
--   not-owner       re-entry asked with a token that does not hold the lock
--   limit-mismatch  held with another limit: limit (1 for a plain lock)
--   mode-conflict   re-entry asked in the other mode than the token holds it

local lock, fence_key, holders, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, reenter = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local fence_retention, mode, limit = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local wait_ms, marked = tonumber(ARGV[7]), ARGV[8] == '1'
local streamed = ARGV[9] == '1'
local counted = mode == 'counted'

local state = redis.call('HMGET', lock, 'owner', 'mode', 'limit')
local owner, held_mode, held_limit = state[1], state[2], tonumber(state[3])
if owner then
  -- A plain lock: one exclusive place.
  if counted then
    return {'limit-mismatch', 'limit', 1}
  end
  if owner == token then
    return {'mode-conflict'}
  end
  if reenter then
    return {'not-owner'}
  end
  return {'held', 'remaining_ms', redis.call('PTTL', lock), 'marked', 0, 'behind_writer', 0}
end

local now = now_ms()
local count = 0
if held_mode then
  count = drop_ended(lock, holders, now)
end

if count > 0 then
  if counted and held_mode == 'counted' and held_limit ~= limit then
    return {'limit-mismatch', 'limit', held_limit}
  end
  local holds = redis.call('HGET', lock, 'h:' .. token)
  if holds then
    if held_mode ~= mode then
      return {'mode-conflict'}
    end
    holds = redis.call('HINCRBY', lock, 'h:' .. token, 1)
    redis.call('HINCRBY', lock, 'holds', 1)
    redis.call('ZADD', holders, now + ttl, token)
    expire_with_latest(lock, holders)
    local fence = tonumber(redis.call('HGET', lock, 'f:' .. token))
    return {'reentered', 'fence', fence, 'holds', holds, 'ttl_ms', ttl, 'expires_at_ms', now + ttl}
  end
  if reenter then
    return {'not-owner'}
  end
  local full = held_mode ~= mode or (counted and count >= limit)
  if full then
    local writer = 0
    if counted and held_mode == 'shared' and wait_ms > 0 then
      mark_writer(writers, token, now, wait_ms)
      writer = 1
    end
    return {'held', 'remaining_ms', earliest_end(holders) - now, 'marked', writer,
      'behind_writer', 0}
  end
elseif reenter then
  return {'not-owner'}
end

if not counted then
  -- A waiting writer goes first: new readers wait behind it.
  local writer_until = writer_waiting(writers, now)
  if writer_until then
    local wait = writer_until - now
    local free = 1
    if count > 0 then
      wait = math.min(wait, earliest_end(holders) - now)
      free = 0
    end
    return {'held', 'remaining_ms', wait, 'marked', 0, 'behind_writer', free}
  end
end

local fence, fence_text = next_fence(fence_key, ttl + fence_retention)
if count == 0 then
  redis.call('HSET', lock, 'mode', mode)
  if counted then
    redis.call('HSET', lock, 'limit', limit)
  end
end
redis.call('HSET', lock, 'h:' .. token, 1, 'f:' .. token, fence_text, 'fence', fence_text)
if streamed then
  redis.call('HSET', lock, 's:' .. token, 1)
end
redis.call('HINCRBY', lock, 'holds', 1)
redis.call('ZADD', holders, now + ttl, token)
expire_with_latest(lock, holders)
if marked then
  redis.call('ZREM', writers, token)
end
local room = 1
if counted and count + 1 >= limit then
  room = 0
end
return {'granted', 'fence', fence, 'holds', 1, 'ttl_ms', ttl, 'expires_at_ms', now + ttl,
  'room', room}
