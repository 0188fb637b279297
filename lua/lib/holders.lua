-- lib/holders.lua: a lock's holders: granting a place, dropping holders
-- whose lease ended, taking a holder out, and what the lock is held as.
--
-- A plain lock (exclusive, one place) is one hash, `lock`, its holder's
-- fields written, read and released by lib/plain.lua alone; its TTL is the
-- lease. A session's holder has the lease SESSION_LEASE: its session's end
-- (which the gateways sweep) ends it, not a time.
--
-- delayed: the Unix ms until which no place is granted (lock-delay, after
-- a session holding the lock expired or was revoked); a hash that has only
-- this field expires then.
--
-- A lock with many holders (shared, or counted with more than one place):
--   lock     hash: mode ('shared' or 'counted'), limit and taken (counted:
--            its places, and how many the holders take together), holds
--            (of every holder together), fence (the newest grant's), and
--            per holder h:<token> (its holds), f:<token> (its fencing
--            token), a:<token> (granted at), s:<token> (streamed),
--            v:<token> (its value), i:<token> (`<idempotency key> <request
--            hash>`), e:<token> (its session, as `session` above),
--            p:<token> (the places it takes of a counted lock, when more
--            than one), and k:<idempotency key> -> token
--   holders  sorted set: each holder's token, scored by its lease's end
--            (Unix ms, Redis clock)
-- The hash and the holders set expire with the latest lease, so nothing
-- outlives its use. No sweeper: every script that touches a lock with many
-- holders first drops those whose lease ended.
--
-- gone     hash: the tokens of streamed holders whose place ended by a
--          release (`released`) or a revocation (`revoked`), each kept
--          until its lease would have ended: a renewal on its way that
--          finds the lock gone learns why, rather than calling it lost.

-- The fields a holder of a lock with many holders has, but its idempotency
-- record's reverse entry.
local HOLDER_FIELDS = {'h:', 'f:', 'a:', 's:', 'v:', 'i:', 'e:', 'p:'}

-- The lease of a session's holder: ends with its session, which the
-- gateways' sweep ends (far in the future as a time: year 144 000).
local SESSION_LEASE = 4503599627370496

-- Keeps the lock unavailable until `until_ms` (lock-delay): a lock nobody
-- holds any more is a hash of that one field, expiring then.
local function delay_until(ctx, until_ms)
  if until_ms <= now_ms(ctx) then
    return
  end
  local held_by = redis.call('HMGET', ctx.lock, 'owner', 'mode')
  if not held_by[1] and not held_by[2] then
    redis.call('DEL', ctx.lock)
    redis.call('HSET', ctx.lock, 'delayed', until_ms)
    redis.call('PEXPIREAT', ctx.lock, until_ms)
  else
    redis.call('HSET', ctx.lock, 'delayed', until_ms)
  end
  on_delayed(ctx, until_ms)
end

-- Removes a holder's fields from a lock with many holders, and gives
-- back the places it took of a counted one.
local function forget_holder(ctx, token)
  local record = redis.call('HMGET', ctx.lock, 'i:' .. token, 'p:' .. token, 'taken')
  if record[1] then
    redis.call('HDEL', ctx.lock, 'k:' .. string.match(record[1], '^(.*) [^ ]*$'))
  end
  if record[3] then
    redis.call('HINCRBY', ctx.lock, 'taken', -tonumber(record[2] or '1'))
  end
  local fields = {}
  for _, field in ipairs(HOLDER_FIELDS) do
    fields[#fields + 1] = field .. token
  end
  redis.call('HDEL', ctx.lock, unpack(fields))
end

-- Drops the holders of a lock with many holders whose lease has ended;
-- returns how many are left. The lock is deleted when none is.
local function drop_ended(ctx)
  local now = now_ms(ctx)
  local ended = redis.call('ZRANGEBYSCORE', ctx.holders, '-inf', now)
  for _, token in ipairs(ended) do
    local holds = tonumber(redis.call('HGET', ctx.lock, 'h:' .. token) or '0')
    redis.call('HINCRBY', ctx.lock, 'holds', -holds)
    forget_holder(ctx, token)
  end
  if #ended > 0 then
    redis.call('ZREMRANGEBYSCORE', ctx.holders, '-inf', now)
  end
  local left = redis.call('ZCARD', ctx.holders)
  if left == 0 then
    local delayed = tonumber(redis.call('HGET', ctx.lock, 'delayed') or '0')
    redis.call('DEL', ctx.lock, ctx.holders)
    delay_until(ctx, delayed)
  end
  return left
end

-- Keeps the lock hash and its holders until the latest lease ends.
local function expire_with_latest(ctx)
  local latest = redis.call('ZRANGE', ctx.holders, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', ctx.lock, latest)
  redis.call('PEXPIREAT', ctx.holders, latest)
end

-- The end of the earliest lease among the holders.
local function earliest_end(ctx)
  return tonumber(redis.call('ZRANGE', ctx.holders, 0, 0, 'WITHSCORES')[2])
end

-- How the lock is held now (after dropping ended holders): `kind` is
-- 'free', 'exclusive' (a plain lock), 'shared' or 'counted'; `limit` its
-- places (counted), `count` its holders, `taken` the places they take
-- (counted: a holder may take several), `free_in` the milliseconds until
-- a place may free (the earliest lease end), `owner` a plain lock's token.
-- `delayed` is the end of a lock-delay in force (Unix ms), else nil; a lock
-- nobody holds during one is 'delayed', and frees when it ends.
local function held(ctx)
  local state = redis.call('HMGET', ctx.lock, 'owner', 'mode', 'limit', 'delayed')
  if state[1] then
    return {kind = 'exclusive', limit = 1, count = 1, owner = state[1],
      free_in = redis.call('PTTL', ctx.lock)}
  end
  local delayed = state[4] and tonumber(state[4])
  if delayed and delayed <= now_ms(ctx) then
    delayed = nil
  end
  if not state[2] then
    if delayed then
      return {kind = 'delayed', count = 0, free_in = delayed - now_ms(ctx), delayed = delayed}
    end
    return {kind = 'free', count = 0, free_in = 0}
  end
  local count = drop_ended(ctx)
  if count == 0 then
    return held(ctx)
  end
  local free_in = earliest_end(ctx) - now_ms(ctx)
  if delayed then
    free_in = math.max(free_in, delayed - now_ms(ctx))
  end
  local taken = count
  if state[2] == 'counted' then
    taken = tonumber(redis.call('HGET', ctx.lock, 'taken') or count)
  end
  return {kind = state[2], limit = tonumber(state[3]), count = count, taken = taken,
    free_in = free_in, delayed = delayed}
end

-- An answer `code` for want of a place: `free_in_ms` (until one may free),
-- and, when nobody holds the lock but a lock-delay keeps it (`state` from
-- held), `delayed_until_ms`, the delay's end: the gateway says so.
local function no_place_now(code, state, free_in)
  if state.kind == 'delayed' then
    return {code, 'free_in_ms', free_in, 'delayed_until_ms', state.delayed}
  end
  return {code, 'free_in_ms', free_in}
end

-- Whether a request of `mode` ('exclusive', 'shared' or 'counted', with
-- `limit`, for `permits` of its places) can take a place of the lock as
-- `state` (from held) says.
local function admits(state, mode, limit, permits)
  if state.delayed then
    return false
  end
  if state.kind == 'free' then
    return true
  end
  if state.kind == 'shared' then
    return mode == 'shared'
  end
  return state.kind == 'counted' and mode == 'counted' and state.limit == limit
    and state.taken + (permits or 1) <= limit
end

-- A new fencing token: one more than the last, and never below the Redis
-- clock in microseconds. The clock keeps tokens increasing after the counter
-- key has expired, so the counter need not be kept forever; the counter
-- keeps them increasing if the clock steps back while it lives. Returns the
-- token as a number and as text (%d: tostring would print 1.7e+15).
-- Usually the clock is ahead of the last token, so one SET ... GET writes
-- the clock's reading and reads back the last token in one call; only when
-- the last token is not below it (two grants in one microsecond, or the
-- clock stepped back) is the counter written again, one above the last.
local function next_fence(ctx, keep_ms)
  local seconds, micros = clock(ctx)
  local now_us = seconds * 1000000 + micros
  local text = string.format('%d', now_us)
  local last = tonumber(redis.call('SET', ctx.fence, text, 'PX', keep_ms, 'GET') or '0')
  if last < now_us then
    return now_us, text
  end
  local fence = last + 1
  text = string.format('%d', fence)
  redis.call('SET', ctx.fence, text, 'PX', keep_ms)
  return fence, text
end

-- The request a grant is made for, in the one table the library keeps
-- for it (so that a run leaves no garbage for it; see `context`): `token`,
-- `mode`, `limit`, `permits`, `ttl`, and nothing else until the caller
-- sets it (`streamed`, `value`, `idem`, `body`, `offer`, `session`).
-- `places` is a counted lock's limit as the scripts take it: `<limit>`,
-- or `<limit> <permits>` for a holder that takes several places.
local run_request = {}
local function grant_request(token, mode, places, ttl)
  local request = run_request
  local limit, permits = string.match(places, '^(%d+) ?(%d*)$')
  request.token, request.mode, request.ttl = token, mode, ttl
  request.limit, request.permits = tonumber(limit), tonumber(permits) or 1
  request.streamed, request.value, request.idem, request.body = false, false, false, nil
  request.offer, request.session = nil, false
  return request
end

-- The grant an Idempotency-Key `idem` made, while it lives: its token and
-- the hash of the request that made it.
local function made_under_key(ctx, idem)
  local plain = redis.call('HMGET', ctx.lock, 'owner', 'idem', 'body')
  if plain[1] then
    if plain[2] == idem then
      return plain[1], plain[3]
    end
    return nil
  end
  local token = redis.call('HGET', ctx.lock, 'k:' .. idem)
  if not token then
    return nil
  end
  local record = redis.call('HGET', ctx.lock, 'i:' .. token) or ''
  return token, string.match(record, ' ([^ ]*)$')
end

-- The handle of a holder's session (from its `session` record), or nil.
local function session_of(place)
  return place.session and string.match(place.session, '^(%S+)')
end

-- Grants a place to `grant` (token, mode, limit, ttl, streamed, value, idem,
-- body, offer) for `lease_ms`, at `now`; `keep_ms` is how long the fence
-- counter outlives the lease. Records the `acquired` event (for an offer to
-- a waiter, when it claims the place). Returns the fencing token and the
-- lease's end.
local function grant_place(ctx, grant, lease_ms, keep_ms)
  local now = now_ms(ctx)
  local fence, fence_text = next_fence(ctx, lease_ms + keep_ms)
  local ends = now + lease_ms
  local token = grant.token
  if grant.mode == 'exclusive' then
    -- The common grant has nothing more: no table to build.
    local extra = nil
    if grant.streamed or grant.value or grant.idem or grant.session then
      extra = {}
      if grant.streamed then
        extra[#extra + 1], extra[#extra + 2] = 'streamed', 1
      end
      if grant.value then
        extra[#extra + 1], extra[#extra + 2] = 'value', grant.value
      end
      if grant.idem then
        extra[#extra + 1], extra[#extra + 2] = 'idem', grant.idem
        extra[#extra + 1], extra[#extra + 2] = 'body', grant.body
      end
      if grant.session then
        extra[#extra + 1], extra[#extra + 2] = 'session', grant.session
      end
    end
    write_plain(ctx.lock, token, 1, fence_text, now, ends, extra)
  else
    local first = redis.call('ZCARD', ctx.holders) == 0
    if first then
      redis.call('HSET', ctx.lock, 'mode', grant.mode)
    end
    if grant.mode == 'counted' then
      local permits = grant.permits or 1
      if first then
        redis.call('HSET', ctx.lock, 'limit', grant.limit, 'taken', permits)
      elseif redis.call('HINCRBY', ctx.lock, 'taken', permits) == permits then
        -- A lock taken before holders counted their places: one each.
        redis.call('HINCRBY', ctx.lock, 'taken', redis.call('ZCARD', ctx.holders))
      end
      if permits > 1 then
        redis.call('HSET', ctx.lock, 'p:' .. token, permits)
      end
    end
    local fields = {'h:' .. token, 1, 'f:' .. token, fence_text, 'fence', fence_text,
      'a:' .. token, now}
    if grant.streamed then
      fields[#fields + 1], fields[#fields + 2] = 's:' .. token, 1
    end
    if grant.value then
      fields[#fields + 1], fields[#fields + 2] = 'v:' .. token, grant.value
    end
    if grant.idem then
      fields[#fields + 1], fields[#fields + 2] = 'i:' .. token, grant.idem .. ' ' .. grant.body
      fields[#fields + 1], fields[#fields + 2] = 'k:' .. grant.idem, token
    end
    if grant.session then
      fields[#fields + 1], fields[#fields + 2] = 'e:' .. token, grant.session
    end
    redis.call('HSET', ctx.lock, unpack(fields))
    redis.call('HINCRBY', ctx.lock, 'holds', 1)
    redis.call('ZADD', ctx.holders, ends, token)
    expire_with_latest(ctx)
  end
  if grant.offer then
    on_offered(ctx, token, fence)
  else
    on_acquired(ctx, token, fence, grant.value, grant.mode, ends, session_of(grant))
  end
  return fence, ends
end

-- A holder as the lock records it: its fencing token (number), holds,
-- streamed flag, value, whether it is a plain lock's, and (for a lock with
-- many holders) its lease's end, which `lease_end` reads for a plain one.
-- When `token` holds no place: nil, and `not-owner` or `not-found` when
-- that is known already (see `no_place`).
local function holder(ctx, token)
  local plain, many = read_plain(ctx.lock)
  if plain then
    if plain.token ~= token then
      return nil, 'not-owner'
    end
    return plain
  end
  if not many then
    return nil, 'not-found'
  end
  local many = redis.call('HMGET', ctx.lock, 'h:' .. token, 'f:' .. token, 's:' .. token,
    'v:' .. token, 'e:' .. token)
  if not many[1] then
    return nil
  end
  local ends = tonumber(redis.call('ZSCORE', ctx.holders, token))
  if not ends or ends <= now_ms(ctx) then
    return nil
  end
  return {fence = tonumber(many[2]), holds = tonumber(many[1]), ends = ends,
    streamed = many[3], value = many[4], session = many[5]}
end

-- The lock-delay of a holder's session, in ms (0 without one).
local function session_delay(place)
  return tonumber(place.session and string.match(place.session, ' (%d+)$') or '0')
end

-- Why a token holds no place: `why` as `holder` said it, or else whether
-- the lock is held by others (`not-owner`) or not at all (`not-found`).
local function no_place(ctx, why)
  if why then
    return why
  end
  if held(ctx).kind == 'free' then
    return 'not-found'
  end
  return 'not-owner'
end

-- When `place` (from holder) ends, Unix ms.
local function lease_end(ctx, place)
  if not place.ends then
    place.ends = redis.call('PEXPIRETIME', ctx.lock)
  end
  return place.ends
end

-- Takes `token`'s place away, every hold of it: `why` is `released`,
-- `revoked`, `expired` (its session expired) or `ended` (its session was
-- deleted: watchers see a release). A streamed holder's end is noted in
-- `gone` (until its lease would have ended), the watchers get the event,
-- and the release channel the holder's fencing token (or `revoked
-- <fence>`, `expired <fence>`, `ended <fence>`).
local function take_place(ctx, token, place, why)
  if place.streamed then
    local ends = lease_end(ctx, place)
    if ends >= SESSION_LEASE then
      ends = now_ms(ctx)
    end
    local keep = math.max(ends - now_ms(ctx), 0) + 1000
    redis.call('HSET', ctx.gone, token, why)
    if redis.call('PTTL', ctx.gone) < keep then
      redis.call('PEXPIRE', ctx.gone, keep)
    end
  end
  if place.plain then
    drop_plain(ctx.lock)
  else
    redis.call('HINCRBY', ctx.lock, 'holds', -place.holds)
    forget_holder(ctx, token)
    redis.call('ZREM', ctx.holders, token)
    if redis.call('ZCARD', ctx.holders) == 0 then
      local delayed = tonumber(redis.call('HGET', ctx.lock, 'delayed') or '0')
      redis.call('DEL', ctx.lock, ctx.holders)
      if delayed > now_ms(ctx) then
        redis.call('HSET', ctx.lock, 'delayed', delayed)
        redis.call('PEXPIREAT', ctx.lock, delayed)
      end
    else
      expire_with_latest(ctx)
    end
  end
  on_ended(ctx, why == 'ended' and 'released' or why, place.fence)
  local message = string.format('%d', place.fence)
  if why ~= 'released' then
    message = why .. ' ' .. message
  end
  redis.call(ctx.publish, channel(ctx, 'released'), message)
end

-- Records `expired` for each holder granted while the lock was watched
-- that holds it no more (its lease ran out; releases and revocations say
-- so themselves). Returns how many.
local function record_expired(ctx)
  if not watched(ctx) then
    return 0
  end
  local live = redis.call('HGETALL', ctx.watch)
  local count = 0
  for i = 1, #live, 2 do
    local kind = string.sub(live[i], 1, 2)
    if (kind == 'f:' or kind == 'o:') and not holder(ctx, live[i + 1]) then
      on_ended(ctx, 'expired', tonumber(string.sub(live[i], 3)))
      count = count + 1
    end
  end
  return count
end

-- How long a watch stands unless a watching instance renews it.
local WATCH_KEPT_MS = 10000

-- Starts the watch, or keeps it another WATCH_KEPT_MS. A watch started anew
-- notes the present holders (their end is owed an event too) and begins
-- the history with a `start` entry: a reader who saw events before it has
-- a gap.
local function keep_watching(ctx)
  local now = now_ms(ctx)
  if not watched(ctx) then
    ctx.busy = true
    redis.call('HSET', ctx.watch, 'since', now)
    local owner = redis.call('HMGET', ctx.lock, 'owner', 'fence')
    if owner[1] then
      redis.call('HSET', ctx.watch, fence_field(owner[2]), owner[1])
    else
      for _, token in ipairs(redis.call('ZRANGE', ctx.holders, 0, -1)) do
        local fence = redis.call('HGET', ctx.lock, 'f:' .. token)
        if fence then
          redis.call('HSET', ctx.watch, fence_field(fence), token)
        end
      end
    end
    record(ctx, 'start', '{}')
  end
  redis.call('PEXPIRE', ctx.watch, WATCH_KEPT_MS)
  redis.call('PEXPIRE', ctx.events, HISTORY_KEPT_MS)
end
