-- leave.lua: a waiter leaves the queue (its client went away, or its wait
-- is over). If its place was granted meanwhile, it learns that instead,
-- or (asked to give it back: it is answered that nothing was granted, as
-- at shutdown) the place goes on to the next waiter in the same step.
-- (After the lock libraries: KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]  the waiter's id
-- ARGV[5]  its token
-- ARGV[6]  how long a fence counter outlives a lease, in milliseconds
-- ARGV[7]  "1" to give back a place it was granted meanwhile, else "0"
--
-- Returns {code, field, value, ...}, by code:
--   left     it was in the queue and is no longer; the waiters behind it
--            were served if they can be now: free_in_ms (until the earliest
--            lease ends now; 0 when free), and delayed_until_ms when a
--            lock-delay alone keeps it
--   granted  it was granted a place before it left: fence, expires_at_ms
--            (its instance keeps it, or gives it back)
--   given-back  it was granted a place, and gave it back (released: the
--            next waiter is served)
--   gone     neither: it was passed over (its instance's presence or its
--            wait had lapsed), or it was granted and has let go: free_in_ms
--            (and delayed_until_ms), as above

local ctx = context(KEYS, ARGV)
local id, token, keep = ARGV[4], ARGV[5], tonumber(ARGV[6])
local give_back = ARGV[7] == '1'

if redis.call('ZSCORE', ctx.queue, id) then
  dequeue(ctx, id, waiter_entry(ctx, id))
  if queued(ctx) then
    serve(ctx, keep)
  end
  local state = held(ctx)
  return no_place_now('left', state, state.free_in)
end
local place = holder(ctx, token)
if place and give_back then
  take_place(ctx, token, place, 'released')
  if queued(ctx) then
    serve(ctx, keep)
  end
  return {'given-back'}
end
if place then
  return {'granted', 'fence', place.fence, 'expires_at_ms', lease_end(ctx, place)}
end
local state = held(ctx)
return no_place_now('gone', state, state.free_in)
