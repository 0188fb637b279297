#!/usr/bin/env bash
# One hot sale on a three-master Redis Cluster with 1, 2 and 3 segments:
# how the purchase scripts spread over the masters, each master's CPU per
# purchase, purchases per second and latency, through nginx and three
# lockgate instances.
#
#   loadtest/bench-segments.sh
#
# Every attempt is a new buyer (new JWT, new Idempotency-Key, quantity 1) on
# a sale with ample stock, so each one runs the whole purchase and no
# segment runs dry (no stock moves between segments). Per master:
#   purchase scripts  the `orders` counts of the segments that master holds
#                     (each purchase.lua that buys adds one): its share of
#                     all purchases, target at most 1.15/N with N segments;
#   script calls      EVALSHA + FCALL (INFO commandstats): the purchase
#                     script, plus the rate-limit script and the per-user
#                     lock's functions, keyed by buyer and so spread over
#                     all masters whatever N;
#   CPU               user + system time of its redis-server (/proc), in µs
#                     per purchase of the whole sale.
# Settings: BENCH_SECONDS (10 per run), BENCH_ROUNDS (3), BENCH_CLIENTS
# (64), LOCKGATE_BIN (else a release build), REDIS_EXTRA_ARGS ("--appendonly
# no": the scripts' own cost, without fsync).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
clients="${BENCH_CLIENTS:-64}"
rounds="${BENCH_ROUNDS:-3}"
export LOCKGATE_ADMIN_TOKEN="bench-$RANDOM$RANDOM"
export LOCKGATE_BUYER_JWT_SECRET="bench-buyers-$RANDOM$RANDOM"
# All the load comes from one address: lift nginx's per-client fence.
export NGINX_RATE=1000000 NGINX_BURST=1000000
export REDIS_EXTRA_ARGS="${REDIS_EXTRA_ARGS:---appendonly no}"

"$root/scripts/ensure-tools.sh" redis nginx k6
if [ -z "${LOCKGATE_BIN:-}" ]; then
  echo "building (release)..." >&2
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate)
fi
export LOCKGATE_BIN="${LOCKGATE_BIN:-$root/target/release/lockgate}"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

CLUSTER_DIR="$(mktemp -d)"
export CLUSTER_DIR
trap '"$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR"' EXIT
REDIS_MODE=cluster CLUSTER_PORT=auto "$root/scripts/cluster.sh" start 2>"$CLUSTER_DIR.start.log" \
  || { cat "$CLUSTER_DIR.start.log" >&2; exit 1; }
rm -f "$CLUSTER_DIR.start.log"
port="$(. "$CLUSTER_DIR/ports.env"; echo "$CLUSTER_PORT")"
masters=()
for pidfile in "$CLUSTER_DIR"/redis-cluster/node-*.pid; do
  node="${pidfile##*/node-}"
  masters+=("${node%.pid}")
done

# script_calls PORT: script and function calls the master has served so far.
script_calls() {
  redis-cli -p "$1" INFO commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_\(evalsha\|fcall\):calls=\([0-9]*\),.*/\2/p' | awk '{n += $1} END {print n + 0}'
}
redis_cpu_ms() { cpu_ms "$(cat "$CLUSTER_DIR/redis-cluster/node-$1.pid")"; }

# The keys of SKU's segments (the sale's own hash is segment 0).
segment_keys() {
  local head="lockgate:sale:{$1}" tags tag
  echo "$head"
  tags="$(redis-cli -c -p "${masters[0]}" HGET "$head" segment_tags)"
  for tag in ${tags//,/ }; do echo "lockgate:sale-segment:{$1#$tag}"; done
}

# orders_on PORT KEY...: the orders of the segments among KEYS that the
# master on PORT holds (a key on another master answers MOVED, not a number).
orders_on() {
  local port="$1" key count total=0 held=0
  shift
  for key in "$@"; do
    count="$(redis-cli -p "$port" HGET "$key" orders 2>/dev/null || true)"
    if [[ "$count" =~ ^[0-9]+$ ]]; then total=$(( total + count )); held=$(( held + 1 )); fi
  done
  echo "$total $held"
}

# snapshot SKU: per master "port orders segments script_calls cpu_ms".
snapshot() {
  local keys m
  mapfile -t keys < <(segment_keys "$1")
  for m in "${masters[@]}"; do
    echo "$m $(orders_on "$m" "${keys[@]}") $(script_calls "$m") $(redis_cpu_ms "$m")"
  done
}

# Each master's CPU with no load (cluster bus, cron, the instances' sweeps
# and health checks): the floor under the CPU per purchase.
idle_before="$(for m in "${masters[@]}"; do redis_cpu_ms "$m"; done)"
sleep 5
idle="$(paste -d' ' <(printf '%s\n' "${masters[@]}") <(echo "$idle_before") \
  <(for m in "${masters[@]}"; do redis_cpu_ms "$m"; done) | awk '{printf "%s%s: %d ms/s", sep, $1, ($3 - $2) / 5; sep=", "}')"

# Rounds interleave the segment counts (1, 2, 3, 1, 2, 3, ...), so a
# change in the machine's other load falls on all of them alike.
for round in $(seq 1 "$rounds"); do
  for segments in 1 2 3; do
    sku="hot-$segments-$round"
    curl -sf -XPUT "http://127.0.0.1:$port/seckill/$sku" \
      -H "Authorization: Bearer $LOCKGATE_ADMIN_TOKEN" -H 'content-type: application/json' \
      -d "{\"stock\": 1000000000, \"per_user_limit\": 1, \"segments\": $segments}" >/dev/null
    echo "round $round: one hot sale over $segments segment(s), ${seconds}s, $clients clients..." >&2
    run="$CLUSTER_DIR/run-$segments-$round"
    snapshot "$sku" >"$run.before"
    cut -d' ' -f1-3 /proc/loadavg >"$run.load"
    BASE_URL="http://127.0.0.1:$port" BUYER_JWT_SECRET="$LOCKGATE_BUYER_JWT_SECRET" \
      SKU="$sku" CLIENTS="$clients" DURATION="${seconds}s" RUN_ID="run-$segments-$round" \
      SUMMARY_FILE="$run.json" k6 run --quiet --no-thresholds "$root/loadtest/seckill-segments.js" \
      >/dev/null 2>"$run.k6.log"
    snapshot "$sku" >"$run.after"
  done
done
end_load="$(cut -d' ' -f1-3 /proc/loadavg)"

# The table, from the figures and the snapshots (python: the arithmetic).
python3 - "$CLUSTER_DIR" "$rounds" "$(nproc)" "$seconds" "$clients" "$idle" "$end_load" <<'PY'
import json, statistics, sys

run_dir, rounds, cores, seconds, clients, idle, end_load = sys.argv[1:8]
rounds = int(rounds)

def snapshot(path):
    rows = {}
    for line in open(path):
        port, orders, segments, calls, cpu_ms = line.split()
        rows[port] = dict(orders=int(orders), segments=int(segments), calls=int(calls), cpu_ms=int(cpu_ms))
    return rows

runs = {}
for n in (1, 2, 3):
    rounds_of_n = []
    for r in range(1, rounds + 1):
        base = f"{run_dir}/run-{n}-{r}"
        before, after = snapshot(f"{base}.before"), snapshot(f"{base}.after")
        masters = [{key: after[port][key] - before[port][key] for key in ("orders", "calls", "cpu_ms")}
                   | {"segments": after[port]["segments"]} for port in after]
        # Each round's sale has its own slots: compare masters by rank, the
        # busiest (most purchase scripts, then CPU) first.
        masters.sort(key=lambda m: (m["orders"], m["cpu_ms"]), reverse=True)
        rounds_of_n.append(dict(figures=json.load(open(f"{base}.json")), load=open(f"{base}.load").read().strip(),
                                masters=masters))
    runs[n] = rounds_of_n

def median(n, key):
    return statistics.median(r["figures"][key] for r in runs[n])

p99_one = median(1, "p99_ms")
print(f"\nOne hot sale over N segments: a three-master Redis Cluster (AOF off), nginx, three lockgate instances;")
print(f"{cores} cores, {clients} k6 clients, each attempt a new buyer (ample stock: every one a 201);")
print(f"{rounds} interleaved round(s) of {seconds}s per segment count: rates and latencies are the rounds' medians,")
print(f"counts and CPU their sums; load average (1/5/15 min) {runs[1][0]['load']} at the start, {end_load} at the end\n")
print("| segments | purchases/s | p50 (ms) | p99 (ms) | p99 vs 1 segment (target <= 1.2x; each round) "
      "| busiest master's share of purchase scripts (target <= 1.15/N) "
      "| busiest master's share of script calls (EVALSHA + FCALL) | Redis CPU per purchase, each master, busiest first (µs) |")
print("|---|---|---|---|---|---|---|---|")
for n in (1, 2, 3):
    purchases = sum(r["figures"]["purchases"] for r in runs[n]) or 1
    ports = range(len(runs[n][0]["masters"]))
    total = lambda port, key: sum(r["masters"][port][key] for r in runs[n])
    scripts = sum(total(port, "orders") for port in ports) or 1
    calls = sum(total(port, "calls") for port in ports) or 1
    busiest = max(total(port, "orders") for port in ports) / scripts
    target = 1.15 / n
    share = (f"{busiest:.0%} (target {target:.0%}) {'ok' if busiest <= target else 'MISSED'}" if n > 1
             else f"{busiest:.0%} (one master)")
    ratio = median(n, "p99_ms") / p99_one if p99_one else 0
    each = "/".join(f"{a['figures']['p99_ms'] / b['figures']['p99_ms']:.2f}" for a, b in zip(runs[n], runs[1]))
    cpu = " / ".join(f"{total(port, 'cpu_ms') * 1000 / purchases:.0f}" for port in ports)
    print(f"| {n} | {median(n, 'purchases_per_second'):.0f} | {median(n, 'p50_ms'):.1f} | {median(n, 'p99_ms'):.1f} "
          f"| {ratio:.2f}x {'ok' if ratio <= 1.2 else 'MISSED'} ({each}) | {share} "
          f"| {max(total(port, 'calls') for port in ports) / calls:.0%} | {cpu} |")
print()
for n in (1, 2, 3):
    purchases = sum(r["figures"]["purchases"] for r in runs[n])
    refused = sum(r["figures"]["refused"] for r in runs[n])
    ports = range(len(runs[n][0]["masters"]))
    detail = "; ".join(
        f"master {port + 1}: {runs[n][0]['masters'][port]['segments']} segment(s), "
        f"{sum(r['masters'][port]['orders'] for r in runs[n])} purchases, "
        f"{sum(r['masters'][port]['calls'] for r in runs[n])} script calls, "
        f"{sum(r['masters'][port]['cpu_ms'] for r in runs[n])} ms CPU" for port in ports)
    calls = sum(r["masters"][port]["calls"] for r in runs[n] for port in ports)
    print(f"{n} segment(s): {purchases} purchases, {refused} refused, "
          f"{calls / max(purchases, 1):.1f} script calls per purchase; {detail}")
print(f"\nEach master with no load (CPU per second): {idle}")
print(f"\nOn this {cores}-core machine the three masters, the three instances, nginx and k6 share the")
print("same cores, so purchases per second cannot scale with the segments here; what the segments")
print("change is each master's share of the work (the scripts and CPU per purchase above), which is")
print("what bounds one hot sale on a Cluster whose masters have cores of their own.")
PY
