-- history.lua: a lock's events after one a watcher saw, or word that the
-- history no longer has them all. (After the lock libraries: KEYS and
-- ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  the id of the last event seen
-- ARGV[5]  the most events to return
--
-- Returns {code, field, value, ...}, by code:
--   events  entries (a JSON list of [id, type, data], oldest first, data
--           as the event's JSON), more (1 when more follow)
--   gap     some events after that id are gone: trimmed, expired, or
--           never written (nobody watched for a while); or the id is
--           newer than every event kept (not one this history sent)

local ctx = context(KEYS, ARGV)
local after, count = ARGV[4], tonumber(ARGV[5])

-- A stream id as two numbers.
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms or '0'), tonumber(seq or '0')
end

local function later(a, b)
  local a_ms, a_seq = parse(a)
  local b_ms, b_seq = parse(b)
  return a_ms > b_ms or (a_ms == b_ms and a_seq > b_seq)
end

local first = redis.call('XRANGE', ctx.events, '-', '+', 'COUNT', 1)[1]
local newest = redis.call('XREVRANGE', ctx.events, '+', '-', 'COUNT', 1)[1]
-- The reader's own event was trimmed away (the history keeps about its
-- last EVENTS_KEPT), and perhaps others after it; or its id is none this
-- history wrote.
if not first or later(first[1], after) or later(after, newest[1]) then
  return {'gap'}
end
local entries = redis.call('XRANGE', ctx.events, '(' .. after, '+', 'COUNT', count + 1)
local list = {}
for i, entry in ipairs(entries) do
  if i > count then
    break
  end
  local fields = entry[2]
  local kind, data = fields[2], fields[4]
  if kind == 'start' then
    -- The history began again after this reader's id: what came between
    -- was never written.
    return {'gap'}
  end
  list[#list + 1] = '[' .. cjson.encode(entry[1]) .. ',' .. cjson.encode(kind) .. ',' .. data .. ']'
end
return {'events', 'entries', '[' .. table.concat(list, ',') .. ']',
  'more', #entries > count and 1 or 0}
