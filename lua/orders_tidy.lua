-- orders_tidy.lua: keep an order stream short, and its consumer group clean.
--
-- KEYS[1]  the order stream
-- KEYS[2]  draining streams   <prefix>sale:{<sku>}:draining
-- ARGV[1]  the hand-off's consumer group
-- ARGV[2]  "drain" when KEYS[1] is an old epoch's stream, else "current"
-- ARGV[3]  how long (ms) a consumer with nothing pending may stay idle
--          before it counts as gone
-- ARGV[4]  the calling worker's consumer name (never removed)
--
-- Entries are trimmed (XTRIM MINID, which Redis 7.0 has) up to the lowest
-- pending entry, or, with none pending, up to the last one delivered: so
-- only entries stored and acknowledged go, never one still to be stored.
-- A consumer is removed only with nothing pending, checked in this same
-- step, so none loses an entry it has just read. An old epoch's stream
-- that is empty is deleted and leaves KEYS[2].
--
-- Returns {'tidied', 'length', n, 'first', id ('' when empty), 'trimmed',
-- n, 'removed', consumers removed}, or {'no-group'}.

local stream, draining, group = KEYS[1], KEYS[2], ARGV[1]
local drain, idle_limit, me = ARGV[2] == 'drain', tonumber(ARGV[3]), ARGV[4]

if redis.call('EXISTS', stream) == 0 then
  if drain then
    redis.call('SREM', draining, stream)
  end
  return {'tidied', 'length', 0, 'first', '', 'trimmed', 0, 'removed', 0}
end

local function fields(flat)
  local map = {}
  for i = 1, #flat, 2 do
    map[flat[i]] = flat[i + 1]
  end
  return map
end

local last_delivered
for _, found in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local info = fields(found)
  if info['name'] == group then
    last_delivered = info['last-delivered-id']
  end
end
if not last_delivered then
  return {'no-group'}
end

local removed = 0
for _, found in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
  local consumer = fields(found)
  if consumer['name'] ~= me and consumer['pending'] == 0 and consumer['idle'] > idle_limit then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer['name'])
    removed = removed + 1
  end
end

local summary = redis.call('XPENDING', stream, group)
local keep_from
if summary[1] > 0 then
  keep_from = summary[2]
else
  local ms, seq = string.match(last_delivered, '^(%d+)-(%d+)$')
  keep_from = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
end
local trimmed = redis.call('XTRIM', stream, 'MINID', keep_from)
local length = redis.call('XLEN', stream)
if drain and length == 0 and summary[1] == 0 then
  redis.call('DEL', stream)
  redis.call('SREM', draining, stream)
end
local first = ''
if length > 0 then
  first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1][1]
end
return {'tidied', 'length', length, 'first', first, 'trimmed', trimmed, 'removed', removed}
