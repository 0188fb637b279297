-- lib/holders.lua: what the lock scripts share, prepended to each of them
-- when the gateway loads it (so the script Redis runs is this, then the
-- script's own file).
--
-- A plain lock (exclusive, one place) is one hash, `lock`, with fields
-- owner, holds, fence (and streamed, 1 for a streamed lock's holder); its
-- TTL is the lease.
--
-- gone     hash: the tokens of streamed holders that gave their lock back
--          (a DELETE with the token, or the stream's end), each until its
--          lease would have ended: a renewal on its way that finds the lock
--          gone learns it was released, not lost.
--
-- A lock with many holders (shared, or counted with more than one place):
--   lock     hash: mode ('shared' or 'counted'), limit (counted), holds (of
--            every holder together), fence (the newest grant's), and per
--            holder h:<token> (its holds), f:<token> (its fencing token) and
--            s:<token> (1 when it is a streamed lock's holder)
--   holders  sorted set: each holder's token, scored by its lease's end
--            (Unix ms, Redis clock)
--   writers  sorted set: the tokens of exclusive requests waiting for shared
--            holders to leave, scored by the end of their presence (at most
--            a second ahead, and renewed by the waiting request's instance
--            while it waits: a writer whose gateway died holds nobody back
--            for longer); while one waits, new shared requests wait too (no
--            writer starvation)
-- The hash and the holders set expire with the latest lease, the writers set
-- with the latest wait, so nothing outlives its use. No sweeper: every script
-- that touches a lock with many holders first drops those whose lease ended.

-- The Redis clock, in Unix milliseconds.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Drops the holders whose lease has ended (at `now`); returns how many are
-- left. The lock is deleted when none is.
local function drop_ended(lock, holders, now)
  local ended = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
  for _, token in ipairs(ended) do
    local holds = tonumber(redis.call('HGET', lock, 'h:' .. token) or '0')
    redis.call('HINCRBY', lock, 'holds', -holds)
    redis.call('HDEL', lock, 'h:' .. token, 'f:' .. token, 's:' .. token)
  end
  if #ended > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  end
  local left = redis.call('ZCARD', holders)
  if left == 0 then
    redis.call('DEL', lock, holders)
  end
  return left
end

-- Keeps the lock hash and its holders until the latest lease ends; returns
-- that end.
local function expire_with_latest(lock, holders)
  local latest = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', lock, latest)
  redis.call('PEXPIREAT', holders, latest)
  return tonumber(latest)
end

-- The end of the earliest lease among the holders.
local function earliest_end(holders)
  return tonumber(redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2])
end

-- The end of the earliest wait among the exclusive requests still waiting
-- (after dropping those whose wait is over), or nil if none waits.
local function writer_waiting(writers, now)
  redis.call('ZREMRANGEBYSCORE', writers, '-inf', now)
  return tonumber(redis.call('ZRANGE', writers, 0, 0, 'WITHSCORES')[2])
end

-- How long a waiting writer's mark stands unless its instance renews it.
local MARK_PRESENCE_MS = 1000

-- Marks `token` as an exclusive request that waits `wait_ms` more: until
-- then, or a second from now if sooner (its instance renews the mark).
local function mark_writer(writers, token, now, wait_ms)
  local until_ms = now + math.min(wait_ms, MARK_PRESENCE_MS)
  redis.call('ZADD', writers, until_ms, token)
  if redis.call('PEXPIRETIME', writers) < until_ms then
    redis.call('PEXPIREAT', writers, until_ms)
  end
end

-- Notes that the streamed holder `token` released its lock, for as long as
-- a renewal of it may still arrive (its lease left, and a second more).
local function note_released(gone, token, lease_left_ms)
  local keep = math.max(lease_left_ms, 0) + 1000
  redis.call('HSET', gone, token, 'released')
  if redis.call('PTTL', gone) < keep then
    redis.call('PEXPIRE', gone, keep)
  end
end

-- A new fencing token: one more than the last, and never below the Redis
-- clock in microseconds. The clock keeps tokens increasing after the counter
-- key has expired, so the counter need not be kept forever; the counter
-- keeps them increasing if the clock steps back while it lives. Returns the
-- token as a number and as text (%d, not tostring: tostring would print
-- 1.7e+15 for a number this large).
local function next_fence(fence_key, keep_ms)
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local fence = math.max(last + 1, now_us)
  local text = string.format('%d', fence)
  redis.call('SET', fence_key, text, 'PX', keep_ms)
  return fence, text
end
