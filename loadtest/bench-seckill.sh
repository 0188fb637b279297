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
#
# Then the order hand-off: the orders that run recorded, stored by one
# `lockgate orders` worker into PostgreSQL and (a copy of them) into SQLite,
# in orders per second; beside the floor, the same number of rows inserted
# in batches of the same size (one transaction each, ON CONFLICT DO
# NOTHING) by psql and by sqlite3 with nothing else.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
clients=64
export LOCKGATE_ADMIN_TOKEN="bench-$RANDOM$RANDOM"
# Buyers carry JWTs, as in make cluster: lockbench signs them (its own CPU).
export LOCKGATE_BUYER_JWT_SECRET="bench-buyers-$RANDOM$RANDOM"
# All the load comes from one address: lift nginx's per-client fence.
export NGINX_RATE=1000000 NGINX_BURST=1000000

"$root/scripts/ensure-tools.sh" rust redis nginx postgresql
echo "building (release)..." >&2
# The `bench` feature adds the switch that skips the per-user lock, which
# only this benchmark uses.
(cd "$root" && cargo build --release --locked --quiet --features bench --bin lockgate --example lockbench)
lockbench="$root/target/release/examples/lockbench"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

CLUSTER_DIR="$(mktemp -d)"
export CLUSTER_DIR
trap 'stop_postgres "$CLUSTER_DIR.pg"; "$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR" "$CLUSTER_DIR.pg" "$CLUSTER_DIR.db"' EXIT

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

# CPU (ms) of every process named $1.
cpu_of() {
  local total=0 pid
  for pid in $(pgrep -x "$1"); do total=$(( total + $(cpu_ms "$pid") )); done
  echo "$total"
}
parts="nginx lockgate redis-server"

echo "purchases through nginx and three instances (${seconds}s)..." >&2
cluster_with ""
declare -A cpu_before
for part in $parts; do cpu_before[$part]="$(cpu_of "$part")"; done
with_lock="$(purchases)"
# Where a purchase's CPU goes: each part's CPU per purchase (µs).
cpu_split=""
for part in $parts; do
  cpu_split+="$part $(( ($(cpu_of "$part") - cpu_before[$part]) * 1000 / $(field "$with_lock" done) )) µs, "
done
cpu_split+="load generator $(python3 -c "print(round($(field "$with_lock" generator_cpu_ms_per_request) * 1000))") µs"

# now_ms: the clock in milliseconds.
now_ms() { date +%s%3N; }

# handoff PREFIX DATABASE: starts a worker on the keys under PREFIX, waits
# until every order of bench-sale is stored; prints how many, and orders
# per second.
handoff() {
  local prefix="$1" database="$2" sale orders started stored=0 worker
  sale="${prefix}sale:{bench-sale}"
  orders="$(redis-cli -p "$REDIS_PORT" HGET "$sale" orders)"
  started="$(now_ms)"
  RUST_LOG=warn "$root/target/release/lockgate" orders --database "$database" --consumer bench \
    --key-prefix "$prefix" --batch 200 --redis-url "redis://127.0.0.1:$REDIS_PORT" \
    >"$CLUSTER_DIR.$prefix.log" 2>&1 &
  worker=$!
  while [ "${stored:-0}" != "$orders" ]; do
    sleep 0.02
    stored="$(redis-cli -p "$REDIS_PORT" HGET "$sale" stored)"
  done
  local elapsed=$(( $(now_ms) - started ))
  kill "$worker"; wait "$worker" 2>/dev/null || true
  echo "$orders $(( orders * 1000 / elapsed ))"
}

# floor_rows N FILE: N synthetic orders as INSERT statements of 200 rows.
floor_rows() {
  python3 - "$1" >"$2" <<'PY'
import sys, uuid
n = int(sys.argv[1])
for start in range(0, n, 200):
    rows = ",".join(
        f"('{uuid.uuid4()}','floor',1,'user-{i}',1,{1795000000000 + i})"
        for i in range(start, min(start + 200, n)))
    print("INSERT INTO orders (order_id, sku, sale_epoch, user_id, quantity, ordered_at_ms) "
          f"VALUES {rows} ON CONFLICT (order_id) DO NOTHING;")
PY
}

echo "the order hand-off: the orders just recorded, into PostgreSQL and SQLite..." >&2
# A copy of the sale for SQLite, under a key prefix of its own.
redis-cli -p "$REDIS_PORT" COPY 'lockgate:sale:{bench-sale}' 'copy:sale:{bench-sale}' >/dev/null
redis-cli -p "$REDIS_PORT" COPY 'lockgate:sale:{bench-sale}:orders' 'copy:sale:{bench-sale}:orders' >/dev/null
start_postgres "$CLUSTER_DIR.pg"
read -r handed into_postgres <<<"$(handoff lockgate: "$pg_url")"
mkdir -p "$CLUSTER_DIR.db"
read -r _ into_sqlite <<<"$(handoff copy: "sqlite://$CLUSTER_DIR.db/orders.db")"
floor_rows "$handed" "$CLUSTER_DIR.db/floor.sql"
psql_run() { psql -X -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres "$@"; }
psql_run -c 'TRUNCATE orders'
started="$(now_ms)"
psql_run -f "$CLUSTER_DIR.db/floor.sql" >/dev/null
floor_postgres=$(( handed * 1000 / ( $(now_ms) - started ) ))
sqlite3 "$CLUSTER_DIR.db/orders.db" 'DELETE FROM orders' >/dev/null
started="$(now_ms)"
sed 's/^/BEGIN; /; s/$/ COMMIT;/' "$CLUSTER_DIR.db/floor.sql" | sqlite3 "$CLUSTER_DIR.db/orders.db"
floor_sqlite=$(( handed * 1000 / ( $(now_ms) - started ) ))
stop_postgres "$CLUSTER_DIR.pg"

echo "the purchase script alone, by redis-benchmark, on the same Redis..." >&2
# The function the gateways call (their library is loaded in this Redis).
purchase="$(redis-cli -p "$REDIS_PORT" FUNCTION LIST | grep -m1 -o 'lockgate_[0-9a-f]*_purchase')"
create_sale raw-sale
sale='lockgate:sale:{raw-sale}'
# The arguments of a purchase by a new user, in any epoch (''), without
# the buyer's lock. redis-benchmark counts any reply as a purchase done, a
# refusal or an error too, so the run is checked: the stock must have gone
# down by one per call.
calls=$(( seconds * 20000 ))
raw="$(redis-benchmark -p "$REDIS_PORT" -c "$clients" -n "$calls" -r 100000000 --csv \
  FCALL "$purchase" 5 "$sale" "$sale:users" "$sale:idem" "$sale:orders" "$sale:by-user" \
  'user-__rand_int__' 1 '' order buy '' | tail -n 1 | cut -d, -f2 | tr -d '"')"
sold_raw=$(( 1000000000 - $(redis-cli -p "$REDIS_PORT" HGET "$sale" stock) ))
if [ "$sold_raw" != "$calls" ]; then
  echo "the purchase script alone sold $sold_raw of $calls calls: its figure would count refusals" >&2
  exit 1
fi
"$root/scripts/cluster.sh" stop

echo "the same load with the per-user lock skipped (${seconds}s)..." >&2
cluster_with "--seckill-user-lock false"
without_lock="$(purchases)"

# share PART WHOLE: PART as a percentage of WHOLE.
share() { python3 -c "print(f'{$1 / float($2):.0%}'.replace('%', ' %'))"; }

cat <<TABLE

lockgate flash-sale benchmark: $(nproc) cores, $(date -u +%Y-%m-%d), ${seconds}s per run, $clients clients,
Redis with AOF appendfsync always (as make cluster runs it)

| measurement | purchases/s | of the script alone | p50 (ms) | p99 (ms) |
|---|---|---|---|---|
| through nginx and three instances (rate limit, user lock, purchase script, release) | $(field "$with_lock" per_second) | $(share "$(field "$with_lock" per_second)" "$raw") (target at least 35 %) | $(field "$with_lock" latency_p50_ms) | $(field "$with_lock" latency_p99_ms) |
| the same, per-user lock skipped | $(field "$without_lock" per_second) | $(share "$(field "$without_lock" per_second)" "$raw") | $(field "$without_lock" latency_p50_ms) | $(field "$without_lock" latency_p99_ms) |
| the purchase script alone, redis-benchmark FCALL | ${raw%.*} | | | |

CPU per purchase through nginx, by part (two cores: at most $(( 2000000 / $(field "$with_lock" per_second) )) µs in all): $cpu_split

The order hand-off, one worker, batches of 200, the $handed orders of the first run:

| measurement | orders/s | of the floor | of the selling rate (target at least 3x) |
|---|---|---|---|
| stored into PostgreSQL by the hand-off | $into_postgres | $(( into_postgres * 100 / floor_postgres )) % (target at least 70 %) | $(python3 -c "print(f'{$into_postgres / float($(field "$with_lock" per_second)):.1f}x')") |
| floor: the same rows by psql | $floor_postgres | | |
| stored into SQLite by the hand-off | $into_sqlite | $(( into_sqlite * 100 / floor_sqlite )) % (target at least 70 %) | $(python3 -c "print(f'{$into_sqlite / float($(field "$with_lock" per_second)):.1f}x')") |
| floor: the same rows by sqlite3 | $floor_sqlite | | |

raw lockbench results:
$with_lock
$without_lock
TABLE
