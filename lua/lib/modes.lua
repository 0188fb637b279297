-- lib/modes.lua: a holder changing its mode without letting go. A shared
-- lock's only holder becomes a plain lock's holder (an upgrade: a new
-- fencing token, since the resource it guards may now be written); a
-- plain lock's holder becomes a shared lock's (a downgrade: its token
-- and fencing token kept). Holds, value, streamed flag, Idempotency-Key
-- record, session and lease go with it.

-- The fence counter's life for a lease ending at `ends`: a session's lease
-- has no end in time, and the clock keeps its tokens increasing.
local function fence_life(ctx, ends, keep_ms)
  if ends >= SESSION_LEASE then
    return keep_ms
  end
  return math.max(ends - now_ms(ctx), 0) + keep_ms
end

-- Turns `token`'s shared place (`place`, from holder), the lock's only
-- one, into the plain lock (`keep_ms`: how long the fence counter outlives
-- the lease). Returns the new fencing token and the lease's
-- end.
local function upgrade_place(ctx, token, place, keep_ms)
  local ends = place.ends
  local record = redis.call('HMGET', ctx.lock, 'a:' .. token, 'i:' .. token, 'delayed')
  local fence, fence_text = next_fence(ctx, fence_life(ctx, ends, keep_ms))
  local fields = {}
  local function add(name, value)
    fields[#fields + 1], fields[#fields + 2] = name, value
  end
  if place.streamed then
    add('streamed', 1)
  end
  if place.value then
    add('value', place.value)
  end
  if record[2] then
    local idem, body = string.match(record[2], '^(.*) ([^ ]*)$')
    add('idem', idem)
    add('body', body)
  end
  if place.session then
    add('session', place.session)
  end
  if record[3] then
    add('delayed', record[3])
  end
  redis.call('DEL', ctx.lock, ctx.holders)
  write_plain(ctx.lock, token, place.holds, fence_text, record[1] or now_ms(ctx), ends,
    #fields > 0 and fields or nil)
  on_mode(ctx, token, place.fence, fence, 'exclusive', ends)
  return fence, ends
end

-- Turns the plain lock `token` holds (`place`, from holder) into a shared
-- lock it is the one holder of. Returns the lease's end.
local function downgrade_place(ctx, token, place)
  local ends = lease_end(ctx, place)
  local lock = redis.call('HMGET', ctx.lock, 'at', 'idem', 'body', 'delayed')
  local fence = string.format('%d', place.fence)
  local fields = {'mode', 'shared', 'holds', place.holds, 'fence', fence,
    'h:' .. token, place.holds, 'f:' .. token, fence, 'a:' .. token, lock[1] or now_ms(ctx)}
  local function add(name, value)
    fields[#fields + 1], fields[#fields + 2] = name, value
  end
  if place.streamed then
    add('s:' .. token, 1)
  end
  if place.value then
    add('v:' .. token, place.value)
  end
  if lock[2] then
    add('i:' .. token, lock[2] .. ' ' .. lock[3])
    add('k:' .. lock[2], token)
  end
  if place.session then
    add('e:' .. token, place.session)
  end
  if lock[4] then
    add('delayed', lock[4])
  end
  redis.call('DEL', ctx.lock)
  redis.call('HSET', ctx.lock, unpack(fields))
  redis.call('ZADD', ctx.holders, ends, token)
  expire_with_latest(ctx)
  on_mode(ctx, token, place.fence, place.fence, 'shared', ends)
  return ends
end
