-- acquire.lua: take a place in a lock for a new holder (a plain lock, a
-- shared lock or a counting lock), or join its queue; or re-enter the place
-- a token holds; or answer again the grant an Idempotency-Key made.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]   token: a fresh one, or the holder's own when re-entering
-- ARGV[5]   mode: 'exclusive' (a plain lock), 'shared' or 'counted'
-- ARGV[6]   the limit of a counted lock (2 or more), and after a space
--           the places the holder takes of it when more than one
--           (`5 2`); 1 otherwise
-- ARGV[7]   lease in milliseconds
-- ARGV[8]   "1" when the client asks to re-enter with its token, else "0"
-- ARGV[9]   how long the fence counter outlives the lease, in milliseconds
-- ARGV[10]  how long the request may still wait, in milliseconds
-- ARGV[11]  the waiter's id when the request should join the queue if it
--           gets no place now (its instance is subscribed to its grant
--           channel), else ''
--           (ARGV[11..19] may be left out together when none applies: a
--           plain try pays for no argument it does not use)
-- ARGV[12]  the instance the request waits on
-- ARGV[13]  "1" for a streamed lock's grant, else "0"
-- ARGV[14]  "1" when the request gives a value, else "0"
-- ARGV[15]  the value (public, shown to everyone)
-- ARGV[16]  the request's Idempotency-Key, or ''
-- ARGV[17]  the hash of the request the key was sent with
-- ARGV[18]  the session it is taken in, `<handle> <lock-delay ms>`, or ''
--           (its lease is then ARGV[7], finite, until its gateway attaches
--           it to the session: see extend.lua)
-- ARGV[19]  (optional) "1" when the waiting instance takes a grant from
--           the queue outright, in one write (data format 2; see
--           lib/queue.lua), else "0"
--
-- Returns {code, field, value, ...}, by code:
--   granted         a new holder: fence (a new fencing token), holds (1),
--                   ttl_ms, expires_at_ms (the lease's end, Unix ms)
--   reentered       fence (the holder's, unchanged), holds (one more),
--                   ttl_ms, expires_at_ms (the lease reset)
--   replayed        the Idempotency-Key's grant still lives: token, fence,
--                   holds, expires_at_ms (of that grant)
--   key-reused      the Idempotency-Key's grant lives, made for another
--                   request
--   queued          no place now; the request waits in the queue at
--                   position (1 is next), and a place may free in
--                   free_in_ms (the earliest lease end); token when it
--                   waits as a retry of a request under the same
--                   Idempotency-Key that waits already (it took that
--                   request's ticket and token: one grant serves both);
--                   now_ms, Redis's clock (Unix ms), by which its instance
--                   tells a grant heard at once from one heard late
--   held            no place now and no wait: free_in_ms, as above; and
--                   delayed_until_ms when nobody holds it but a
--                   lock-delay keeps it (Unix ms, its end)
--   not-owner       re-entry asked with a token that does not hold the lock
--   limit-mismatch  held with another limit: limit (1 for a plain lock)
--   mode-conflict   re-entry asked in the other mode than the token holds it

local ctx = context(KEYS, ARGV)
local request = grant_request(ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]))
request.streamed = ARGV[13] == '1'
request.value = ARGV[14] == '1' and ARGV[15]
request.idem = (ARGV[16] or '') ~= '' and ARGV[16]
request.body = ARGV[17]
request.session = (ARGV[18] or '') ~= '' and ARGV[18]
local reenter, keep = ARGV[8] == '1', tonumber(ARGV[9])

local wait_ms, waiter_id, instance = tonumber(ARGV[10]), ARGV[11] or '', ARGV[12]
local outright = ARGV[19] == '1' and 1 or nil

if request.idem and not reenter then
  local token, body = made_under_key(ctx, request.idem)
  local place = token and holder(ctx, token)
  if place then
    if body ~= request.body then
      return {'key-reused'}
    end
    return {'replayed', 'token', token, 'fence', place.fence, 'holds', place.holds,
      'expires_at_ms', lease_end(ctx, place)}
  end
end

-- A retry of a request that still waits under the same Idempotency-Key
-- waits with it (its ticket, its token), never for a grant of its own.
if request.idem and not reenter and queued(ctx) then
  local first = waiting_under(ctx, request.idem)[1]
  local waiter = first and waiter_entry(ctx, first)
  if waiter then
    if waiter.body ~= request.body then
      return {'key-reused'}
    end
    local state = held(ctx)
    local free_in = math.max(state.free_in, 1)
    if waiter_id == '' or wait_ms <= 0 then
      return no_place_now('held', state, free_in)
    end
    local position = redis.call('ZRANK', ctx.queue, waiter_id)
    if not position then
      local now = now_ms(ctx)
      local retry = cjson.decode(cjson.encode(waiter))
      retry.id, retry.inst, retry.since, retry.deadline = waiter_id, instance, now, now + wait_ms
      retry.one = outright
      enqueue(ctx, retry, redis.call('ZSCORE', ctx.queue, first))
      -- A place the first request could not take (its instance away) may
      -- be this one's.
      serve(ctx, keep)
      position = redis.call('ZRANK', ctx.queue, waiter_id)
    end
    return {'queued', 'position', position and position + 1 or 1, 'free_in_ms', free_in,
      'token', waiter.token, 'now_ms', now_ms(ctx)}
  end
end

local state = held(ctx)

if reenter then
  local place = holder(ctx, request.token)
  if not place then
    return {'not-owner'}
  end
  if (state.kind == 'shared') ~= (request.mode == 'shared') then
    return {'mode-conflict'}
  end
  if state.kind == 'exclusive' and request.mode == 'counted' then
    return {'limit-mismatch', 'limit', 1}
  end
  if state.kind == 'counted' and state.limit ~= request.limit then
    return {'limit-mismatch', 'limit', state.limit}
  end
  -- A session's holder keeps its session's lease: re-entry renews nothing.
  local ends = place.session and lease_end(ctx, place) or now_ms(ctx) + request.ttl
  local holds
  if state.kind == 'exclusive' then
    holds = hold_plain_again(ctx.lock, ends)
  else
    holds = redis.call('HINCRBY', ctx.lock, 'h:' .. request.token, 1)
    redis.call('HINCRBY', ctx.lock, 'holds', 1)
    redis.call('ZADD', ctx.holders, ends, request.token)
    expire_with_latest(ctx)
  end
  return {'reentered', 'fence', place.fence, 'holds', holds, 'ttl_ms', ends - now_ms(ctx),
    'expires_at_ms', ends, 'session', session_of(place) or ''}
end

-- Two clients that disagree on a limit are told, never given another one.
if state.kind == 'exclusive' and request.mode == 'counted' then
  return {'limit-mismatch', 'limit', 1}
end
if state.kind == 'counted' and request.mode ~= 'shared' and state.limit ~= request.limit then
  return {'limit-mismatch', 'limit', state.limit}
end

-- Those who wait go first: a place that frees is theirs, in order. (A
-- plain lock that is held has no place for anyone: no need to ask.) A
-- newcomer may take a place only when nobody who may be served waits.
local waits = false
if state.kind ~= 'exclusive' and queued(ctx) then
  local _, served_all = serve(ctx, keep)
  waits = served_all
  state = held(ctx)
end
if admits(state, request.mode, request.limit, request.permits) and not waits then
  local fence, ends = grant_place(ctx, request, request.ttl, keep)
  return {'granted', 'fence', fence, 'holds', 1, 'ttl_ms', request.ttl, 'expires_at_ms', ends}
end

local free_in = math.max(state.free_in, 1)
if waiter_id == '' or wait_ms <= 0 then
  return no_place_now('held', state, free_in)
end
local position = redis.call('ZRANK', ctx.queue, waiter_id)
if position then
  position = position + 1
else
  local now = now_ms(ctx)
  position = enqueue(ctx, {id = waiter_id, inst = instance, token = request.token,
    mode = request.mode, limit = request.limit, permits = request.permits, ttl = request.ttl,
    since = now,
    deadline = now + wait_ms, streamed = request.streamed and 1 or 0,
    value = request.value or false, idem = request.idem or false, body = request.body,
    session = request.session or false, one = outright})
end
return {'queued', 'position', position, 'free_in_ms', free_in, 'now_ms', now_ms(ctx)}
