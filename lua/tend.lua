-- tend.lua: what an instance does for a lock it has waiters or watchers
-- on, every few hundred milliseconds and when a lease it knows of ends:
-- renews its presence (its waiters keep their places) and its watch,
-- records the expiries owed to watchers, serves the queue if a place is
-- free (a lease that ran out frees a place without any release), and
-- reports where its streamed waiters stand. (After the lock libraries:
-- KEYS and ARGV[1..3] as lib/base.lua says.)
--
-- ARGV[4]   the instance
-- ARGV[5]   "1" when it has waiters on the lock, else "0"
-- ARGV[6]   "1" when it has watchers on the lock, else "0"
-- ARGV[7]   how long a fence counter outlives a lease, in milliseconds
-- ARGV[8..] ids of the instance's waiters whose position it reports
--
-- Returns {code, field, value, ...}, by code:
--   tended  free_in_ms (until the earliest lease ends; 0 when free),
--           positions (the waiters' positions, comma-separated in the order
--           asked, 0 for one no longer in the queue), queued (how many
--           wait, on every instance), restarted (1 when the watch had
--           lapsed and was started again: the history has a gap),
--           lapsed (1 when the instance has waiters here but its
--           presence had lapsed for so long, or the queue was gone, that
--           its waiters may have lost their places: it should ask where
--           each of them stands)

local ctx = context(KEYS, ARGV)
local instance, waiting, watching = ARGV[4], ARGV[5] == '1', ARGV[6] == '1'
local keep = tonumber(ARGV[7])
local now = now_ms(ctx)

local lapsed = 0
if waiting then
  if queued(ctx) then
    local presence = redis.call('HGET', ctx.waiters, '@' .. instance)
    if not presence or tonumber(presence) + AWAY_MS < now then
      lapsed = 1
    end
    renew_presence(ctx, instance)
  else
    lapsed = 1
  end
end
local restarted = 0
if watching then
  if not watched(ctx) then
    restarted = 1
  end
  keep_watching(ctx)
end
record_expired(ctx)
if queued(ctx) then
  serve(ctx, keep)
end
local positions = {}
for i = 8, #ARGV do
  local rank = redis.call('ZRANK', ctx.queue, ARGV[i])
  positions[#positions + 1] = rank and rank + 1 or 0
end
return {'tended', 'free_in_ms', held(ctx).free_in,
  'positions', table.concat(positions, ','), 'queued', redis.call('ZCARD', ctx.queue),
  'restarted', restarted, 'lapsed', lapsed}
