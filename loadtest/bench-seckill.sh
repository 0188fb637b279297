#!/usr/bin/env bash
# The flash-sale benchmark: purchase attempts per second through nginx and
# three lockgate instances (rate limit, per-user lock, purchase script,
# release), beside raw Redis running the same purchase script
# (redis-benchmark), and the same load with the per-user lock skipped.
#
#   loadtest/bench-seckill.sh        (part of: make bench)
#
# BENCH_SECONDS sets each run's length (default 10). Every attempt is a new
# user with a new Idempotency-Key on a sale with ample stock, so every one
# does the whole work of a purchase and answers 201.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
clients=64
export LOCKGATE_ADMIN_TOKEN="bench-$RANDOM$RANDOM"
# Buyers carry JWTs, as in make cluster: lockbench signs them (its own CPU).
export LOCKGATE_BUYER_JWT_SECRET="bench-buyers-$RANDOM$RANDOM"
# All the load comes from one address: lift nginx's per-client fence.
export NGINX_RATE=1000000 NGINX_BURST=1000000

"$root/scripts/ensure-tools.sh" rust redis nginx
echo "building (release)..." >&2
# The `bench` feature adds the switch that skips the per-user lock, which
# only this benchmark uses.
(cd "$root" && cargo build --release --locked --quiet --features bench --bin lockgate --example lockbench)
lockbench="$root/target/release/examples/lockbench"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

CLUSTER_DIR="$(mktemp -d)"
export CLUSTER_DIR
trap '"$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR"' EXIT

create_sale() {
  curl -sf -XPUT "http://127.0.0.1:$CLUSTER_PORT/seckill/$1" \
    -H "Authorization: Bearer $LOCKGATE_ADMIN_TOKEN" -H 'content-type: application/json' \
    -d '{"stock": 1000000000, "per_user_limit": 1000000000}' >/dev/null
}

# Starts a fresh cluster whose instances get the extra flags $1.
cluster_with() {
  CLUSTER_PORT=auto GATEWAY_FLAGS="$1" "$root/scripts/cluster.sh" start 2>"$CLUSTER_DIR.start.log" || { cat "$CLUSTER_DIR.start.log" >&2; return 1; }
  # shellcheck source=/dev/null
  source "$CLUSTER_DIR/ports.env"
}

purchases() {
  create_sale bench-sale
  "$lockbench" purchases --url "http://127.0.0.1:$CLUSTER_PORT" --sku bench-sale \
    --clients "$clients" --seconds "$seconds"
}

echo "purchases through nginx and three instances (${seconds}s)..." >&2
cluster_with ""
with_lock="$(purchases)"

echo "the purchase script alone, by redis-benchmark, on the same Redis..." >&2
sha="$(redis-cli -p "$REDIS_PORT" script load "$(cat "$root/lua/purchase.lua")")"
create_sale raw-sale
sale='lockgate:sale:{raw-sale}'
raw="$(redis-benchmark -p "$REDIS_PORT" -c "$clients" -n $(( seconds * 20000 )) -r 100000000 --csv \
  EVALSHA "$sha" 5 "$sale" "$sale:users" "$sale:idem" "$sale:orders" "$sale:by-user" \
  'user-__rand_int__' 1 '' order buy | tail -n 1 | cut -d, -f2 | tr -d '"')"
"$root/scripts/cluster.sh" stop

echo "the same load with the per-user lock skipped (${seconds}s)..." >&2
cluster_with "--seckill-user-lock false"
without_lock="$(purchases)"

cat <<TABLE

lockgate flash-sale benchmark: $(nproc) cores, $(date -u +%Y-%m-%d), ${seconds}s per run, $clients clients,
Redis with AOF appendfsync always (as make cluster runs it)

| measurement | purchases/s | p50 (ms) | p99 (ms) |
|---|---|---|---|
| through nginx and three instances (rate limit, user lock, purchase script, release) | $(field "$with_lock" per_second) | $(field "$with_lock" latency_p50_ms) | $(field "$with_lock" latency_p99_ms) |
| the same, per-user lock skipped | $(field "$without_lock" per_second) | $(field "$without_lock" latency_p50_ms) | $(field "$without_lock" latency_p99_ms) |
| the purchase script alone, redis-benchmark EVALSHA | ${raw%.*} | | |

raw lockbench results:
$with_lock
$without_lock
TABLE
