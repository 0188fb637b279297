#!/usr/bin/env bash
# What each part of a plain lock cycle costs Redis, in instructions: small
# functions that each do one thing the lock scripts do, run by
# redis-benchmark against a Redis under callgrind (instructions repeat
# whatever else the machine is doing), each beside an empty function.
#
#   loadtest/redis-cost-parts.sh [calls per part, default 3000]
#
# Prints, per part, Redis's instructions per call above the empty
# function's (an FCALL with two keys and three arguments that returns 1).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
calls="${1:-3000}"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
scratch

port="$(free_port)"
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p.out" \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" 2>"$work/valgrind.log" &
pid=$!
pids+=("$pid")
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.3; done

# Each part: a function of its own. KEYS[1] a hash, KEYS[2] a counter.
redis-cli -p "$port" FUNCTION LOAD REPLACE "#!lua name=parts
redis.register_function('empty', function(KEYS, ARGV) return 1 end)
redis.register_function('time', function(KEYS, ARGV)
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end)
redis.register_function('incr_pexpire', function(KEYS, ARGV)
  local f = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], 86430000)
  return f
end)
redis.register_function('get_set_px', function(KEYS, ARGV)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now_us)
  local text = string.format('%d', f)
  redis.call('SET', KEYS[2], text, 'PX', 86430000)
  return text
end)
redis.register_function('set_get_px', function(KEYS, ARGV)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local text = string.format('%d', now_us)
  local last = tonumber(redis.call('SET', KEYS[2], text, 'PX', 86430000, 'GET') or '0')
  if last >= now_us then
    text = string.format('%d', last + 1)
    redis.call('SET', KEYS[2], text, 'PX', 86430000)
  end
  return text
end)
redis.register_function('pexpire_pexpiretime', function(KEYS, ARGV)
  redis.call('PEXPIRE', KEYS[1], 30000)
  return redis.call('PEXPIRETIME', KEYS[1])
end)
redis.register_function('time_pexpireat', function(KEYS, ARGV)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return redis.call('PEXPIREAT', KEYS[1], now + 30000)
end)
redis.register_function('hget_owner', function(KEYS, ARGV)
  return redis.call('HGET', KEYS[1], 'owner')
end)
redis.register_function('exists_two', function(KEYS, ARGV)
  return redis.call('EXISTS', KEYS[1] .. 'q', KEYS[1] .. 'w')
end)
redis.register_function('hmget3', function(KEYS, ARGV)
  return redis.call('HMGET', KEYS[1], 'owner', 'fence', 'holds')[1]
end)
redis.register_function('hmget7', function(KEYS, ARGV)
  return redis.call('HMGET', KEYS[1], 'owner', 'fence', 'holds', 'streamed', 'value', 'mode', 'session')[1]
end)
redis.register_function('hmget7_table', function(KEYS, ARGV)
  local p = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'holds', 'streamed', 'value', 'mode', 'session')
  local place = {fence = tonumber(p[2]), holds = tonumber(p[3]), plain = true, streamed = p[4], value = p[5], session = p[7]}
  return place.holds
end)
local ctx = {}
redis.register_function('context16', function(KEYS, ARGV)
  ctx.lock, ctx.fence, ctx.holders, ctx.queue = KEYS[1], KEYS[2], KEYS[1], KEYS[1]
  ctx.waiters, ctx.watch, ctx.events, ctx.gone = KEYS[1], KEYS[1], KEYS[1], KEYS[1]
  ctx.publish, ctx.prefix, ctx.key = ARGV[1], ARGV[2], ARGV[3]
  ctx.seconds, ctx.micros, ctx.busy, ctx.batch = nil, nil, nil, nil
  return 1
end)
redis.register_function('match_places', function(KEYS, ARGV)
  local limit, permits = string.match('1', '^(%d+) ?(%d*)$')
  return tonumber(limit) + (tonumber(permits) or 1)
end)
redis.register_function('channel_format', function(KEYS, ARGV)
  local c = ARGV[2] .. 'released:{' .. ARGV[3] .. '}'
  return string.format('%d', 1795702285358429) .. c
end)
" >/dev/null
redis-cli -p "$port" HSET parts:lock owner t fence 1795702285358429 holds 1 at 1795702285358 >/dev/null

# part NAME [NUMKEYS KEYS... ARGS...]: Redis's instructions per call of it.
per_call() {
  local name="$1" dump
  shift
  callgrind_control --zero "$pid" >/dev/null 2>&1
  redis-benchmark -p "$port" -c 10 -n "$calls" FCALL "$@" >/dev/null
  callgrind_control --dump="$name" "$pid" >/dev/null 2>&1
  dump="$(grep -l "^desc: Trigger: .*$name\$" "$work"/callgrind.*.out* | tail -n 1)"
  awk -v calls="$calls" '/^(summary|totals):/ {print int($2 / calls); exit}' "$dump"
}
two_keys=(2 parts:lock parts:fence PUBLISH lockgate: orders:42)
eight_keys=(8 parts:lock parts:fence parts:holders parts:queue parts:waiters parts:watch parts:events parts:gone
  PUBLISH lockgate: orders:42 4b2f0a4e-9c1d-4a57-b2a8-0f6f5c1e3d21 exclusive 1 30000 0 86400000 0)
empty="$(per_call empty empty "${two_keys[@]}")"
echo "| part | Redis instructions per call above an empty FCALL (${empty} with 2 keys, 3 arguments) |"
echo "|---|---|"
echo "| the gateway's 8 keys and 10 arguments instead of 2 and 3 (empty function) | $(( $(per_call empty8 empty "${eight_keys[@]}") - empty )) |"
for part in time incr_pexpire get_set_px set_get_px time_pexpireat pexpire_pexpiretime hget_owner exists_two hmget3 hmget7 hmget7_table context16 match_places channel_format; do
  echo "| $part | $(( $(per_call "$part" "$part" "${two_keys[@]}") - empty )) |"
done
# redis-benchmark counts an error reply as a call done: a part that failed
# would be timed as if it had run.
errors="$(redis-cli -p "$port" INFO errorstats | grep '^errorstat_' || true)"
if [ -n "$errors" ]; then
  echo "some parts were answered with errors:" >&2
  echo "$errors" >&2
  exit 1
fi
