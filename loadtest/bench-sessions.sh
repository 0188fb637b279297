#!/usr/bin/env bash
# The sessions and batch benchmark: what a session and a batch cost, and a
# randomized run that checks them, on one Redis and on a three-master Redis
# Cluster, in one run on one machine.
#
#   loadtest/bench-sessions.sh        (make bench runs it)
#
#   keepalive   Redis commands per session keepalive with 1, 100 and 10 000
#               locks attached (INFO commandstats; must not grow)
#   in session  a plain lock cycle in a session beside the same cycle
#               without one (lockbench cycles [--session]), rounds in turn
#   batch       POST /locks/batch of 2, 5 and 10 keys beside the same keys one
#               POST /locks at a time (lockbench batch [--one-by-one]), and
#               Redis's CPU per batch of 10 beside a single lock cycle
#   deadlock    two sessions closing a cycle: from the closing request to
#               its 409 deadlock
#   expiry      on the Cluster: 1000 locks in one session across the masters,
#               kept by one gateway that is then killed; when each lock's
#               waiter (on a second gateway) is granted, after the session's
#               expiry (loadtest/sessions_bench.py expiry)
#   random      BENCH_RANDOM_SECONDS (default 60) of clients taking random
#               batches of overlapping keys, then of sessions taking random
#               locks one at a time in random order with waits: batches/s,
#               overlapping holds (must be 0), waits answered past their
#               wait_ms (must be 0), deadlock refusals and any that the
#               clients' own log of holds and waits shows no cycle for
#
# LOCKGATE_BIN and LOCKBENCH_BIN may name prebuilt binaries; otherwise they
# are built (cargo build --release, into CARGO_TARGET_DIR if set).
# BENCH_SECONDS sets each throughput run's length (default 10), BENCH_ROUNDS
# the rounds of the paired runs (default 3). Fails if any check fails.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
rounds="${BENCH_ROUNDS:-3}"
random_seconds="${BENCH_RANDOM_SECONDS:-60}"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
scratch
scratch_extra() {
  if [ -d "$work/redis-cluster" ]; then "$root/scripts/redis-cluster.sh" stop "$work/redis-cluster"; fi
}
say() { printf 'bench-sessions: %s\n' "$*" >&2; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

"$root/scripts/ensure-tools.sh" rust redis curl
lockgate="${LOCKGATE_BIN:-}"
lockbench="${LOCKBENCH_BIN:-}"
if [ -z "$lockgate" ] || [ -z "$lockbench" ]; then
  say "building (release)..."
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate --example lockbench)
  target="${CARGO_TARGET_DIR:-$root/target}"
  lockgate="${lockgate:-$target/release/lockgate}"
  lockbench="${lockbench:-$target/release/examples/lockbench}"
fi
sessions_bench=(python3 "$root/loadtest/sessions_bench.py")
load_before="$(cut -d' ' -f1 /proc/loadavg)"

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
pids+=("$redis_pid")
wait_for redis-cli -p "$redis_port" ping

start_gateway() {
  local port; port="$(free_port)"
  "$lockgate" serve --listen "127.0.0.1:$port" "$@" >>"$work/gateways.log" 2>&1 &
  gateway_pid=$!
  pids+=("$gateway_pid")
  gateway="http://127.0.0.1:$port"
  wait_for curl -sf "$gateway/readyz"
}
start_gateway --redis-url "redis://127.0.0.1:$redis_port"

# measured LOCKBENCH-ARGS...: one lockbench run with Redis's CPU (from
# /proc) and commands (INFO commandstats, each by name; the benchmark's own
# INFO and CONFIG left out) per cycle; prints JSON.
measured() {
  local r0 r1 run
  redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null
  r0=$(cpu_ms "$redis_pid")
  run="$("$lockbench" "$@")" || { say "lockbench $1 failed"; exit 1; }
  r1=$(cpu_ms "$redis_pid")
  redis-cli -p "$redis_port" INFO commandstats >"$work/stats"
  python3 - "$run" "$r0" "$r1" "$work/stats" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
done = r["done"]
commands = {}
for line in open(sys.argv[4]):
    if line.startswith("cmdstat_") and not line.startswith(("cmdstat_info:", "cmdstat_config")):
        name, fields = line[len("cmdstat_"):].split(":", 1)
        values = dict(item.split("=") for item in fields.strip().split(","))
        if int(values["failed_calls"]) or int(values["rejected_calls"]):
            sys.exit(f"{r['mode']}: Redis answered errors: {line.strip()}")
        commands[name] = round(int(values["calls"]) / done, 2)
r["redis_cpu_us_per_cycle"] = round((int(sys.argv[3]) - int(sys.argv[2])) * 1000 / done, 1)
r["redis_calls_per_cycle"] = round(sum(commands.values()), 2)
r["commands"] = {name: calls for name, calls in commands.items() if calls >= 0.01}
print(json.dumps(r))
PY
}

say "a lock cycle in a session and without, $rounds rounds of ${seconds}s each..."
session_rounds=""
for _ in $(seq "$rounds"); do
  plain="$(measured cycles --url "$gateway" --clients 50 --seconds "$seconds")"
  in_session="$(measured cycles --url "$gateway" --clients 50 --seconds "$seconds" --session)"
  session_rounds+="{\"plain\": $plain, \"session\": $in_session}"$'\n'
done

say "batches of 2, 5 and 10 keys beside the same keys one by one (${seconds}s each)..."
batch_runs=""
for size in 2 5 10; do
  batch_runs+="$(measured batch --url "$gateway" --clients 50 --seconds "$seconds" --size "$size")"$'\n'
  batch_runs+="$(measured batch --url "$gateway" --clients 50 --seconds "$seconds" --size "$size" --one-by-one)"$'\n'
done

say "keepalive's Redis commands with 1, 100 and 10 000 locks..."
keepalive="$("${sessions_bench[@]}" keepalive --url "$gateway" --redis-port "$redis_port")"
say "deadlock detection, one Redis..."
deadlock_one="$("${sessions_bench[@]}" deadlock --url "$gateway" --rounds 20)"
say "random batches, then random session waits, one Redis (${random_seconds}s each)..."
random_batches_one="$("${sessions_bench[@]}" random --url "$gateway" --kind batches --seconds "$random_seconds")"
random_sessions_one="$("${sessions_bench[@]}" random --url "$gateway" --kind sessions --seconds "$random_seconds")"
kill "$gateway_pid" "$redis_pid"; wait "$gateway_pid" "$redis_pid" 2>/dev/null || true

say "a three-master Redis Cluster and two gateways..."
cluster_nodes="$(REDIS_EXTRA_ARGS="--appendonly no" "$root/scripts/redis-cluster.sh" start "$work/redis-cluster")"
start_gateway --redis-cluster-nodes "$cluster_nodes"
keeper_pid="$gateway_pid" keeper="$gateway"
start_gateway --redis-cluster-nodes "$cluster_nodes"
say "1000 locks in one session across the masters, its keeper killed..."
expiry="$("${sessions_bench[@]}" expiry --keeper-url "$keeper" --keeper-pid "$keeper_pid" --url "$gateway" --locks 1000)"
say "deadlock detection, Cluster..."
deadlock_cluster="$("${sessions_bench[@]}" deadlock --url "$gateway" --rounds 20)"
say "random batches, then random session waits, Cluster (${random_seconds}s each)..."
random_batches_cluster="$("${sessions_bench[@]}" random --url "$gateway" --kind batches --seconds "$random_seconds")"
random_sessions_cluster="$("${sessions_bench[@]}" random --url "$gateway" --kind sessions --seconds "$random_seconds")"

python3 - "$session_rounds" "$batch_runs" "$keepalive" "$deadlock_one" "$deadlock_cluster" "$expiry" \
  "$random_batches_one" "$random_sessions_one" "$random_batches_cluster" "$random_sessions_cluster" \
  "$load_before" "$(cut -d' ' -f1 /proc/loadavg)" "$seconds" <<'PY'
import json, statistics, sys
(session_rounds, batch_runs, keepalive, deadlock_one, deadlock_cluster, expiry,
 rb1, rs1, rbc, rsc, load_before, load_after, seconds) = sys.argv[1:14]
rounds = [json.loads(l) for l in session_rounds.splitlines() if l]
batches = [json.loads(l) for l in batch_runs.splitlines() if l]
keepalive, expiry = json.loads(keepalive), json.loads(expiry)
d1, dc = json.loads(deadlock_one), json.loads(deadlock_cluster)
randoms = [("one Redis", json.loads(rb1), json.loads(rs1)), ("Cluster", json.loads(rbc), json.loads(rsc))]
med = statistics.median
failed = []

print(f"\nlockgate sessions and batches: {seconds}s per run, load average {load_before} before, {load_after} after\n")
print("| measurement | figure | comparison in the same run | ratio |")
print("|---|---|---|---|")
plain_rate = med([r["plain"]["per_second"] for r in rounds])
ratio = med([r["plain"]["per_second"] / r["session"]["per_second"] for r in rounds])
cpu_ratio = med([r["session"]["redis_cpu_us_per_cycle"] / r["plain"]["redis_cpu_us_per_cycle"] for r in rounds])
each = ", ".join(f'{r["plain"]["per_second"] / r["session"]["per_second"]:.2f}' for r in rounds)
print(f'| lock cycles/s in a session (50 clients, a session each) | {med([r["session"]["per_second"] for r in rounds]):,.0f} '
      f'| without a session: {plain_rate:,.0f} | time per cycle {ratio:.2f}x (rounds {each}); target at most 1.1 |')
print(f'| Redis per cycle in a session: CPU µs, commands | {med([r["session"]["redis_cpu_us_per_cycle"] for r in rounds]):.1f}, '
      f'{med([r["session"]["redis_calls_per_cycle"] for r in rounds]):.1f} | without: '
      f'{med([r["plain"]["redis_cpu_us_per_cycle"] for r in rounds]):.1f}, {med([r["plain"]["redis_calls_per_cycle"] for r in rounds]):.1f} '
      f'| {cpu_ratio:.2f}x |')
last = rounds[-1]
names = sorted(set(last["plain"]["commands"]) | set(last["session"]["commands"]))
print("| Redis commands per cycle (last round), without a session / in one | " + ", ".join(
    f'{n} {last["plain"]["commands"].get(n, 0):g} / {last["session"]["commands"].get(n, 0):g}' for n in names) + " | | |")
by = {(b["mode"], b["size"]): b for b in batches}
single_cpu = med([r["plain"]["redis_cpu_us_per_cycle"] for r in rounds])
for size in (2, 5, 10):
    b, o = by[("batch", size)], by[("one-by-one", size)]
    print(f'| {size} keys by POST /locks/batch: sets/s; Redis CPU µs and commands per set | {b["per_second"]:,}; '
          f'{b["redis_cpu_us_per_cycle"]:.1f}, {b["redis_calls_per_cycle"]:.1f} | one by one: {o["per_second"]:,}; '
          f'{o["redis_cpu_us_per_cycle"]:.1f}, {o["redis_calls_per_cycle"]:.1f} | {b["per_second"] / o["per_second"]:.2f}x the sets/s |')
ten = by[("batch", 10)]["redis_cpu_us_per_cycle"] / single_cpu
print(f'| Redis CPU per batch of 10 (taken and released) beside a single lock cycle | {by[("batch", 10)]["redis_cpu_us_per_cycle"]:.1f} µs '
      f'| single cycle: {single_cpu:.1f} µs | {ten:.2f}x ({ten / 10:.2f}x per lock); target at most 1.5 |')
counts = [row["calls_per_keepalive"] for row in keepalive["rows"]]
texts = ", ".join(f'{row["locks"]:,} locks: {row["calls_per_keepalive"]:.1f} ({row["redis_usec_per_keepalive"]:.0f} µs in commands)'
                  for row in keepalive["rows"])
constant = max(counts) - min(counts) < 0.5
print(f'| Redis commands per session keepalive | {texts} | | {"constant" if constant else "GROWS"} |')
if not constant:
    failed.append("keepalive commands grow with the locks")
for name, d in (("one Redis", d1), ("Cluster", dc)):
    print(f'| deadlock: closing request to its 409, {name}, {d["rounds"]} rounds: p50 / p99 / max (ms) '
          f'| {d["p50_ms"]} / {d["p99_ms"]} / {d["max_ms"]} | closing request refused {d["refused_closing"]} times, the older wait {d["refused_older_instead"]} | |')
print(f'| Cluster: {expiry["locks"]} locks in one session (ttl {expiry["ttl_ms"]} ms), keeper gateway killed: each lock\'s next grant after the session\'s expiry, '
      f'min / p50 / p99 / max (ms) | {expiry["release_after_expiry_min_ms"]} / {expiry["release_after_expiry_p50_ms"]} / '
      f'{expiry["release_after_expiry_p99_ms"]} / {expiry["release_after_expiry_max_ms"]} | granted {expiry["granted"]} of {expiry["locks"]} '
      f'| spread {expiry["spread_ms"]} ms; API: within 1 s |')
if expiry["granted"] != expiry["locks"] or (expiry["release_after_expiry_min_ms"] or 0) < -5:
    failed.append("expiry: not every lock was freed, or one before the session's expiry")
print("\n| randomized run | where | sets or locks granted/s | granted | refused held | deadlock refusals (no cycle in the clients' log) | overlaps | stuck past wait_ms |")
print("|---|---|---|---|---|---|---|---|")
for where, rb, rs in randoms:
    for r in (rb, rs):
        print(f'| {r["mode"]} ({r["clients"]} clients, {r["keys"]} keys, {r["seconds"]}s) | {where} | {r["granted_per_second"]} | {r["granted"]} '
              f'| {r["held"]} | {r["deadlock"]} ({r["deadlock_unconfirmed"]}) | {r["overlaps"]} | {r["stuck"]} |')
        if r["overlaps"] or r["stuck"] or r["deadlock_unconfirmed"] or r["client_failures"] or r["other_answers"]:
            failed.append(f'{r["mode"]} on {where}: {json.dumps(r)}')
print("\nraw results:")
for line in [*session_rounds.splitlines(), *batch_runs.splitlines()]:
    if line:
        print(line)
for r in (keepalive, d1, dc, expiry, *[x for _, a, b in randoms for x in (a, b)]):
    print(json.dumps(r))
if failed:
    print("\nFAILED:\n" + "\n".join(failed))
    sys.exit(1)
PY
