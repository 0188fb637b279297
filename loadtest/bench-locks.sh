#!/usr/bin/env bash
# The lock benchmark: lockgate beside raw Redis, a sleep-and-poll lock, and
# (when installed) etcd's HTTP lock API, in one run on one machine.
#
#   loadtest/bench-locks.sh        (or: make bench)
#
# Starts its own Redis (no persistence) and a release build of the gateway
# (logging at its default level) on free loopback ports, drives them with loadtest/lockbench.rs (one
# thread, raw HTTP/1.1), and prints a table: lock cycles (beside the floor,
# loadtest/floor.rs: the same stack and scripts with nothing of the
# gateway's, and beside the three ways to reach Redis), contention (plain,
# read-write and counting locks), waiters' memory, and how many streamed
# locks one gateway keeps renewed; and last round's gateway beside this
# one: its uncontended cycles (throughput, its CPU and Redis's per
# request), contention, hand-off across three instances and 10 000 waiters'
# memory, built from BENCH_BASELINE (a commit; default 58f8e1a, the last
# before sessions, batches, permissions and TLS; empty skips it).
# The gateway, the floor and last round's gateway run the uncontended load
# in turn, BENCH_ROUNDS times (default 3); each figure is the median of the
# rounds, each ratio the median of the rounds' own ratios.
# BENCH_SECONDS sets each run's length (default 10).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
rounds="${BENCH_ROUNDS:-3}"
work="$(mktemp -d)"
baseline_rev="${BENCH_BASELINE-58f8e1a}"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  git -C "$root" worktree remove --force "$work/baseline" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -d "$work/redis-cluster" ] && "$root/scripts/redis-cluster.sh" stop "$work/redis-cluster"
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

"$root/scripts/ensure-tools.sh" rust redis
# LOCKGATE_BIN, LOCKBENCH_BIN and FLOOR_BIN may name prebuilt binaries.
lockgate="${LOCKGATE_BIN:-}" lockbench="${LOCKBENCH_BIN:-}" floor="${FLOOR_BIN:-}"
if [ -z "$lockgate" ] || [ -z "$lockbench" ] || [ -z "$floor" ]; then
  echo "building (release)..." >&2
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate --example lockbench --example floor)
  target="${CARGO_TARGET_DIR:-$root/target}"
  lockgate="${lockgate:-$target/release/lockgate}"
  lockbench="${lockbench:-$target/release/examples/lockbench}"
  floor="${floor:-$target/release/examples/floor}"
fi
baseline=""
if [ -n "$baseline_rev" ]; then
  echo "building last round's gateway ($baseline_rev, release)..." >&2
  git -C "$root" worktree add --detach --force "$work/baseline" "$baseline_rev" >/dev/null 2>&1
  (cd "$work/baseline" && CARGO_TARGET_DIR="$root/target/baseline" cargo build --release --locked --quiet --bin lockgate)
  git -C "$root" worktree remove --force "$work/baseline"
  baseline="$root/target/baseline/release/lockgate"
fi

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
redis_pid=$!
wait_for redis-cli -p "$redis_port" ping

gateway_port="$(free_port)"
"$lockgate" serve --listen "127.0.0.1:$gateway_port" \
  --redis-url "redis://127.0.0.1:$redis_port" >"$work/gateway.log" 2>&1 &
pids+=($!)
gateway_pid=$!
gateway="http://127.0.0.1:$gateway_port"
wait_for curl -sf "$gateway/readyz"
sleep 1
rss_idle="$(rss_mib "$gateway_pid")"

echo "uncontended cycles through the gateway (${seconds}s)..." >&2
g0=$(cpu_ms "$gateway_pid"); r0=$(cpu_ms "$redis_pid")
cycles="$("$lockbench" cycles --url "$gateway" --clients 50 --seconds "$seconds")"
g1=$(cpu_ms "$gateway_pid"); r1=$(cpu_ms "$redis_pid")
requests="$(field "$cycles" requests)"
gateway_us=$(( (g1 - g0) * 1000 / requests ))
redis_us=$(( (r1 - r0) * 1000 / requests ))

# Uncontended cycles against a server started by "$@" on $port: cycles/s,
# the server's and Redis's CPU per request (µs), as JSON.
measure_cycles() {
  local port; port="$(free_port)"
  "$@" >"$work/measured.log" 2>&1 &
  local pid=$!
  wait_for curl -s -o /dev/null "http://127.0.0.1:$port/locks"
  local c0 r0; c0=$(cpu_ms "$pid"); r0=$(cpu_ms "$redis_pid")
  local run; run="$("$lockbench" cycles --url "http://127.0.0.1:$port" --clients 50 --seconds "$seconds")"
  local c1 r1; c1=$(cpu_ms "$pid"); r1=$(cpu_ms "$redis_pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "import json, sys; r = json.loads(sys.argv[1]); print(json.dumps({'per_second': r['per_second'], 'cpu_us': round(($c1 - $c0) * 1000 / r['requests'], 1), 'redis_us': round(($r1 - $r0) * 1000 / r['requests'], 1)}))" "$run"
}
# Servers for measure_cycles, on the $port it chose; exec, so that the pid
# it measures is the server's own.
gateway_with() {
  exec "$lockgate" serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$redis_port" "$@"
}
floor_server() {
  exec "$floor" --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$redis_port" "$@"
}
baseline_with() {
  exec "$baseline" serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$redis_port" "$@"
}
# Starts $2 gateways of binary $1 on the benchmark's Redis; their URLs,
# comma-separated, in $urls, and their pids in $started.
start_gateways() {
  urls="" started=()
  for _ in $(seq "$2"); do
    local port; port="$(free_port)"
    "$1" serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$redis_port" \
      >>"$work/gateways.log" 2>&1 &
    pids+=($!); started+=($!)
    wait_for curl -sf "http://127.0.0.1:$port/readyz"
    urls="${urls:+$urls,}http://127.0.0.1:$port"
  done
}
stop_gateways() {
  kill "${started[@]}"; wait "${started[@]}" 2>/dev/null || true
}

echo "uncontended cycles: the gateway, the floor${baseline:+ and the last round gateway} in turn, $rounds rounds of ${seconds}s..." >&2
paired=""
for _ in $(seq "$rounds"); do
  now_run="$(measure_cycles gateway_with)"
  floor_run="$(measure_cycles floor_server)"
  last_run="null"
  [ -n "$baseline" ] && last_run="$(measure_cycles baseline_with)"
  paired+="{\"gateway\": $now_run, \"floor\": $floor_run, \"last\": $last_run}"$'\n'
done
# Medians of the rounds: each figure, and each ratio of a round's own pair.
# Prints the table's rows, gateway against the floor and against last round.
python3 - "$paired" "$baseline_rev" >"$work/paired.md" <<'PY'
import json, statistics, sys
rounds = [json.loads(line) for line in sys.argv[1].splitlines() if line]
med = lambda values: statistics.median(values)
def row(name, field, against, label, target, fmt="{:,.0f}"):
    ours = med([r["gateway"][field] for r in rounds])
    theirs = med([r[against][field] for r in rounds])
    ratio = med([r["gateway"][field] / r[against][field] for r in rounds])
    each = ", ".join(f'{r["gateway"][field] / r[against][field]:.2f}' for r in rounds)
    print(f"| {name} | {fmt.format(ours)} | {label}: {fmt.format(theirs)} | {ratio:.2f} (rounds {each}){target} |")
row("uncontended lock cycles/s, beside the floor (loadtest/floor.rs: axum, hyper, tokio, redis-rs, the same scripts and connection, nothing else)", "per_second", "floor", "floor", "; target at least 0.85")
row("server CPU per uncontended request (µs), beside the floor", "cpu_us", "floor", "floor", "; target at most 1.25", "{:.1f}")
row("Redis CPU per uncontended request (µs), beside the floor's", "redis_us", "floor", "floor", "; target at most 1.1", "{:.1f}")
if rounds[0]["last"]:
    row("uncontended lock cycles/s, beside last round's gateway", "per_second", "last", f"last round ({sys.argv[2]})", "; target at least 0.97")
    row("server CPU per uncontended request (µs), beside last round's gateway", "cpu_us", "last", f"last round ({sys.argv[2]})", "; target at most 1.03", "{:.1f}")
    row("Redis CPU per uncontended request (µs), beside last round's gateway's", "redis_us", "last", f"last round ({sys.argv[2]})", "; target at most 1.03", "{:.1f}")
PY
paired_rows="$(cat "$work/paired.md")"
echo "the ways to reach Redis (${seconds}s each)..." >&2
pool_shared="$(measure_cycles gateway_with --redis-pool shared)"
pool_checkout="$(measure_cycles gateway_with --redis-pool checkout)"
# deadpool-redis as it ships, measured in the floor: the same stack with
# nothing of the gateway's but that pool.
pool_deadpool="$(measure_cycles floor_server --pool deadpool-redis)"

echo "the same scripts by redis-benchmark..." >&2
# The functions of the lock library the gateway loaded into this Redis.
function_named() {
  redis-cli -p "$redis_port" --raw FUNCTION LIST LIBRARYNAME 'lockgate_*' | grep -m1 "^lockgate_.*_$1\$"
}
acquire_function="$(function_named acquire)"
release_function="$(function_named release)"
# The eight keys of lock bench:<n> (lua/lib/base.lua), and the three
# arguments every lock script takes first.
lock_args=()
for name in lock fence holders queue waiters watch events gone; do
  lock_args+=("bench:$name:{__rand_int__}")
done
lock_args+=(PUBLISH bench: __rand_int__)
# Acquire and release run at once over 1000 keys with one token, so every
# call does real work: grant or find the lock held, free it or find it free.
# (redis-benchmark draws each __rand_int__ of a command anew, so one call's
# keys are of different locks: on one Redis that is still a real call.)
# An error reply counts as a request done for redis-benchmark, so the run
# fails if Redis answered any (INFO errorstats, the functions' failed calls).
n=$(( seconds * 50000 ))
redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null
redis-benchmark -p "$redis_port" -c 25 -n "$n" -r 1000 --csv \
  FCALL "$acquire_function" 8 "${lock_args[@]}" \
  token exclusive 1 30000 0 86400000 0 >"$work/acquire.csv" &
bench_acquire=$!
redis-benchmark -p "$redis_port" -c 25 -n "$n" -r 1000 --csv \
  FCALL "$release_function" 8 "${lock_args[@]}" \
  token one 86400000 >"$work/release.csv"
wait "$bench_acquire"
redis_errors="$(redis-cli -p "$redis_port" INFO errorstats | grep '^errorstat_' || true)"
fcall_failed="$(redis-cli -p "$redis_port" INFO commandstats | sed -n 's/^cmdstat_fcall:.*failed_calls=\([0-9]*\).*/\1/p')"
if [ -n "$redis_errors" ] || [ "${fcall_failed:-0}" != 0 ]; then
  echo "redis-benchmark's FCALLs were answered with errors (failed calls: ${fcall_failed:-?}):" >&2
  echo "$redis_errors" >&2
  exit 1
fi
rps() { tail -n 1 "$1" | cut -d, -f2 | tr -d '"'; }
raw_cycles="$(python3 -c "print(round(($(rps "$work/acquire.csv") + $(rps "$work/release.csv")) / 2))")"

echo "contended: 8 clients on one key, gateway wait vs 20 ms poll lock (${seconds}s each)..." >&2
contended="$("$lockbench" contended --url "$gateway" --clients 8 --hold-ms 1 --work-ms 5 --seconds "$seconds")"
poll="$("$lockbench" poll --redis "redis://127.0.0.1:$redis_port" --clients 8 --hold-ms 1 --work-ms 5 --poll-ms 20 --seconds "$seconds")"
echo "the same 8 clients as a read-write lock (6 readers, 2 writers) and a counting lock of 3 (${seconds}s each)..." >&2
read_write="$("$lockbench" contended --url "$gateway" --clients 8 --readers 6 --hold-ms 1 --work-ms 5 --seconds "$seconds")"
counted="$("$lockbench" contended --url "$gateway" --clients 8 --limit 3 --hold-ms 1 --work-ms 5 --seconds "$seconds")"

etcd_line="not installed (Debian: apt-get install etcd-server)"
if command -v etcd >/dev/null 2>&1; then
  echo "etcd's HTTP lock API (${seconds}s)..." >&2
  etcd_port="$(free_port)"; etcd_peer="$(free_port)"
  etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" >"$work/etcd.log" 2>&1 &
  pids+=($!)
  wait_for curl -sf "http://127.0.0.1:$etcd_port/health"
  etcd_run="$("$lockbench" etcd --url "http://127.0.0.1:$etcd_port" --clients 50 --seconds "$seconds")"
  etcd_line="$(field "$etcd_run" per_second) lock cycles/s (generator $(field "$etcd_run" generator_cpu_ms_per_request) ms CPU/request)"
fi

echo "uncontended cycles against a three-master Redis Cluster (${seconds}s)..." >&2
# Without persistence, like the single Redis above.
cluster_nodes="$(REDIS_EXTRA_ARGS="--appendonly no" "$root/scripts/redis-cluster.sh" start "$work/redis-cluster")"
cluster_gateway_port="$(free_port)"
"$lockgate" serve --listen "127.0.0.1:$cluster_gateway_port" \
  --redis-cluster-nodes "$cluster_nodes" >"$work/gateway-cluster.log" 2>&1 &
pids+=($!)
wait_for curl -sf "http://127.0.0.1:$cluster_gateway_port/readyz"
on_cluster="$("$lockbench" cycles --url "http://127.0.0.1:$cluster_gateway_port" --clients 50 --seconds "$seconds")"
kill "${pids[-1]}"
"$root/scripts/redis-cluster.sh" stop "$work/redis-cluster"

echo "hand-off: 100 waiters over three gateways, then on one, 5 rounds each..." >&2
start_gateways "$lockgate" 3
handoff="$("$lockbench" handoff --urls "$urls" --waiters 100 --rounds 5)"
stop_gateways
start_gateways "$lockgate" 1
handoff_one="$("$lockbench" handoff --urls "$urls" --waiters 100 --rounds 5)"
stop_gateways
handoff_row="| hand-off from a release to the next holder, 100 waiters over three gateways: p50 / p99 (ms), granted out of arrival order | $(field "$handoff" handoff_p50_ms) / $(field "$handoff" handoff_p99_ms), $(field "$handoff" out_of_order) of $(field "$handoff" done) | the same 100 waiters on one gateway: $(field "$handoff_one" handoff_p50_ms) / $(field "$handoff_one" handoff_p99_ms), $(field "$handoff_one" out_of_order) of $(field "$handoff_one" done) | |"
baseline_rows="" baseline_results=""
if [ -n "$baseline" ]; then
  echo "last round's gateway ($baseline_rev): contention, hand-off (${seconds}s each)..." >&2
  start_gateways "$baseline" 1
  baseline_contended="$("$lockbench" contended --url "$urls" --clients 8 --hold-ms 1 --work-ms 5 --seconds "$seconds")"
  stop_gateways
  start_gateways "$baseline" 3
  baseline_handoff="$("$lockbench" handoff --urls "$urls" --waiters 100 --rounds 5)"
  stop_gateways
  baseline_rows="| this round beside last round ($baseline_rev): contended acquisitions/s, wait p50 / p99 (ms) | $(field "$contended" per_second), $(field "$contended" wait_p50_ms) / $(field "$contended" wait_p99_ms) | last round: $(field "$baseline_contended" per_second), $(field "$baseline_contended" wait_p50_ms) / $(field "$baseline_contended" wait_p99_ms) | |
| this round beside last round: hand-off over three gateways, p50 / p99 (ms), out of arrival order | $(field "$handoff" handoff_p50_ms) / $(field "$handoff" handoff_p99_ms), $(field "$handoff" out_of_order) | last round: $(field "$baseline_handoff" handoff_p50_ms) / $(field "$baseline_handoff" handoff_p99_ms), $(field "$baseline_handoff" out_of_order) | |"
  baseline_results="$baseline_contended
$baseline_handoff"
fi

echo "10 000 waiters..." >&2
waiters="$("$lockbench" waiters --url "$gateway" --clients 10000 --pid "$gateway_pid")"
rss_waiting="$(python3 -c "print(round($(field "$waiters" rss_waiting_kib) / 1024, 1))")"
echo "10 000 waiters on axum's own serve, a handler that only waits (the floor)..." >&2
port="$(free_port)"
"$floor" --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$redis_port" >"$work/floor-waiters.log" 2>&1 &
floor_pid=$!
wait_for curl -s -o /dev/null "http://127.0.0.1:$port/locks"
floor_waiters="$("$lockbench" waiters --url "http://127.0.0.1:$port" --clients 10000 --pid "$floor_pid")"
kill "$floor_pid"; wait "$floor_pid" 2>/dev/null || true
floor_rss_waiting="$(python3 -c "print(round($(field "$floor_waiters" rss_waiting_kib) / 1024, 1))")"
waiters_ratio="$(python3 -c "print(f'{$rss_waiting / $floor_rss_waiting:.2f}')")"
baseline_waiters_row=""
if [ -n "$baseline" ]; then
  echo "10 000 waiters on last round's gateway..." >&2
  start_gateways "$baseline" 1
  baseline_waiters="$("$lockbench" waiters --url "$urls" --clients 10000 --pid "${started[0]}")"
  stop_gateways
  baseline_rss_waiting="$(python3 -c "print(round($(field "$baseline_waiters" rss_waiting_kib) / 1024, 1))")"
  baseline_waiters_row="| RSS with 10 000 waiting requests (MiB), beside last round's gateway | $rss_waiting | last round ($baseline_rev): $baseline_rss_waiting | $(python3 -c "print(f'{$rss_waiting / $baseline_rss_waiting:.2f}')"); target at most 1.03 |"$'\n'
fi

echo "streamed locks, ttl_ms 3000 (${seconds}s each)..." >&2
# Each count against a fresh gateway, so one run's memory is not the next's.
# The open file limit (ulimit -n, shared by the gateway and the load
# generator) caps the largest count.
stream_rows="" stream_results="" kept=0
for count in 1000 5000 10000 15000; do
  port="$(free_port)"
  "$lockgate" serve --listen "127.0.0.1:$port" \
    --redis-url "redis://127.0.0.1:$redis_port" >"$work/gateway-streams.log" 2>&1 &
  stream_gateway=$!
  wait_for curl -sf "http://127.0.0.1:$port/readyz"
  run="$("$lockbench" streams --url "http://127.0.0.1:$port" --clients "$count" --ttl-ms 3000 \
    --seconds "$seconds" --pid "$stream_gateway")"
  kill "$stream_gateway"; wait "$stream_gateway" 2>/dev/null || true
  stream_results+="$run"$'\n'
  row="$(python3 - "$run" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
thousands = r["streams"] / 1000
on_time = r["renewals_seen"] / max(r["renewals_expected"], 1)
mib = (r["rss_held_kib"] - r["rss_idle_kib"]) / 1024
ok = r["lost"] == 0 and r["ended_early"] == 0 and on_time >= 0.99
print(f'| {r["streams"]} | {on_time:.1%} | {r["lost"]} | {r["gateway_cpu_percent"]:.1f} % '
      f'({r["gateway_cpu_percent"] / thousands:.1f} % per 1000) | {mib:.0f} MiB ({mib / thousands:.1f} MiB per 1000) | {"yes" if ok else "no"} |')
PY
)"
  stream_rows+="$row"$'\n'
  case "$row" in *"| yes |") kept="$count" ;; esac
done

cat <<EOF

lockgate lock benchmark: $(nproc) cores, $(date -u +%Y-%m-%d), ${seconds}s per run, Redis without persistence

| measurement | lockgate | comparison in the same run | ratio |
|---|---|---|---|
| uncontended lock cycles/s (acquire + release, 50 clients, distinct keys), one run | $(field "$cycles" per_second) | redis-benchmark, the same functions by FCALL: $raw_cycles | $(python3 -c "print(f'{$(field "$cycles" per_second) / $raw_cycles:.2f}')") |
$paired_rows
| uncontended cycles/s by way to Redis (server CPU per request, µs) | gateway, shared connections (the default): $(field "$pool_shared" per_second) ($(field "$pool_shared" cpu_us)); gateway, checkout pool: $(field "$pool_checkout" per_second) ($(field "$pool_checkout" cpu_us)) | floor, deadpool-redis as it ships: $(field "$pool_deadpool" per_second) ($(field "$pool_deadpool" cpu_us)) | |
| the same, one gateway on a three-master Redis Cluster on the same machine | $(field "$on_cluster" per_second) | | |
| contended acquisitions/s (8 clients, one key, hold 1 ms, work 5 ms) | $(field "$contended" per_second) | 20 ms sleep-and-poll SETNX lock: $(field "$poll" per_second) | |
| contended wait p50 / p99 (ms) | $(field "$contended" wait_p50_ms) / $(field "$contended" wait_p99_ms) | $(field "$poll" wait_p50_ms) / $(field "$poll" wait_p99_ms) | |
| the same 8 clients on a read-write lock, 6 readers and 2 writers: acquisitions/s | $(field "$read_write" per_second) ($(field "$read_write" reads) reads, $(field "$read_write" writes) writes) | the plain lock above: $(field "$contended" per_second) | |
| read-write wait p50 / p99 (ms), readers; writers | $(field "$read_write" read_wait_p50_ms) / $(field "$read_write" read_wait_p99_ms); $(field "$read_write" write_wait_p50_ms) / $(field "$read_write" write_wait_p99_ms) | | |
| the same 8 clients on a counting lock of 3 places: acquisitions/s, wait p50 / p99 (ms) | $(field "$counted" per_second), $(field "$counted" wait_p50_ms) / $(field "$counted" wait_p99_ms) | | |
| etcd HTTP lock API, same uncontended load | | $etcd_line | |
$handoff_row
$baseline_rows
| RSS with 10 000 waiting requests (MiB; idle: $rss_idle) | $rss_waiting | axum's own serve, a handler that only waits: $floor_rss_waiting | $waiters_ratio; target at most 0.75 |
$baseline_waiters_row| CPU per uncontended request (µs), one run: gateway / Redis / load generator | $gateway_us / $redis_us / $(python3 -c "print(round($(field "$cycles" generator_cpu_ms_per_request) * 1000))") | | |

Streamed locks (ttl_ms 3000, renewed every second by one gateway; held ${seconds}s once all
are granted): the most kept renewed on time, with nothing lost, is $kept.

| streamed locks | renewals on time | lost | gateway CPU | gateway memory | all kept |
|---|---|---|---|---|---|
$stream_rows
raw lockbench results:
$cycles
$paired
pools: gateway shared $pool_shared, gateway checkout $pool_checkout, floor deadpool-redis $pool_deadpool
$on_cluster
$contended
$poll
$read_write
$counted
$handoff
$handoff_one
$baseline_results
$waiters
floor $floor_waiters
$stream_results
EOF
