-- session_release.lua: a session ended: its holder's place of this lock
-- ends with it (an expiry, or the session deleted), and with an expiry the
-- lock stays unavailable until the session's lock-delay is over. The
-- queue is served (a waiter is granted once the delay ends: its instance
-- tends the lock then). (After the lock libraries: KEYS and ARGV[1..3] as
-- lib/base.lua says.)
--
-- ARGV[4]  the session holder's token
-- ARGV[5]  why: `expired` (watchers get `expired`) or `deleted` (watchers
--          get `released`); a streamed holder is told its session ended
-- ARGV[6]  the end of the lock-delay (Unix ms; 0 for none)
-- ARGV[7]  how long a fence counter outlives a lease, in milliseconds
--
-- Returns {code, ...}, by code:
--   ended  the place ended
--   gone   the token held no place (released already, or never granted)

local ctx = context(KEYS, ARGV)
local token, why = ARGV[4], ARGV[5]
local delayed, keep = tonumber(ARGV[6]), tonumber(ARGV[7])

local place = holder(ctx, token)
if not place then
  return {'gone'}
end
take_place(ctx, token, place, why == 'expired' and 'expired' or 'ended')
delay_until(ctx, delayed)
if queued(ctx) then
  serve(ctx, keep)
end
return {'ended'}
