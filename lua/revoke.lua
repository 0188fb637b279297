-- revoke.lua: end every hold of a lock at once (an operator taking it from
-- a stuck holder). Each streamed holder learns it was revoked, the
-- watchers get `revoked`, the queue is served, and the next grant's
-- fencing token is larger than any before (the fence counter is kept), so
-- a resource that checks fencing tokens refuses the old holders' writes.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  how long the fence counter outlives the longest lease, in
--          milliseconds
-- ARGV[5]  the longest lease a client may ask for, in milliseconds
--
-- Returns {code, field, value, ...}, by code:
--   revoked    holders (how many places were taken back)
--   not-found  nobody holds the lock

local ctx = context(KEYS, ARGV)
local keep, longest = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms(ctx)

local state = held(ctx)
if state.kind == 'free' then
  return {'not-found'}
end
local tokens
if state.kind == 'exclusive' then
  tokens = {state.owner}
else
  tokens = redis.call('ZRANGE', ctx.holders, 0, -1)
end
for _, token in ipairs(tokens) do
  local place = holder(ctx, token)
  if place then
    take_place(ctx, token, place, 'revoked')
  end
end
-- Whatever the old holders' leases were, the counter outlives them.
if redis.call('PTTL', ctx.fence) < longest + keep then
  redis.call('PEXPIRE', ctx.fence, longest + keep)
end
if queued(ctx) then
  serve(ctx, keep)
end
return {'revoked', 'holders', #tokens}
