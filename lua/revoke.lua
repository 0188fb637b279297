-- revoke.lua: end every hold of a lock at once (an operator taking it from
-- a stuck holder). Each streamed holder learns it was revoked, the
-- watchers get `revoked`, the queue is served, and the next grant's
-- fencing token is larger than any before (the fence counter is kept), so
-- a resource that checks fencing tokens refuses the old holders' writes.
-- A hold of a session with a lock-delay keeps the lock unavailable that
-- long.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  how long the fence counter outlives the longest lease, in
--          milliseconds
-- ARGV[5]  the longest lease a client may ask for, in milliseconds
-- ARGV[6]  the fencing token of the one hold to end (the one an operator
--          saw stuck), or '' for every hold
--
-- Returns {code, field, value, ...}, by code:
--   revoked    holders (how many places were taken back), sessions (the
--              revoked holders of a session, `<handle> <token>` each,
--              space-separated: their sessions forget them; '' for none)
--   not-found  nobody holds the lock, or not with that fencing token

local ctx = context(KEYS, ARGV)
local keep, longest = tonumber(ARGV[4]), tonumber(ARGV[5])
local only = tonumber(ARGV[6] or '')

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
local revoked, sessions = 0, {}
for _, token in ipairs(tokens) do
  local place = holder(ctx, token)
  if place and (not only or place.fence == only) then
    take_place(ctx, token, place, 'revoked')
    -- A session's lock keeps its session's lock-delay.
    delay_until(ctx, now_ms(ctx) + session_delay(place))
    revoked = revoked + 1
    if session_of(place) then
      sessions[#sessions + 1] = session_of(place) .. ' ' .. token
    end
  end
end
if revoked == 0 then
  return {'not-found'}
end
-- Whatever the old holders' leases were, the counter outlives them.
if redis.call('PTTL', ctx.fence) < longest + keep then
  redis.call('PEXPIRE', ctx.fence, longest + keep)
end
if queued(ctx) then
  serve(ctx, keep)
end
return {'revoked', 'holders', revoked, 'sessions', table.concat(sessions, ' ')}
