#!/usr/bin/env bash
# The k6 load tests against a real cluster: Redis, three lockgate instances,
# nginx. Fails when any invariant breaks.
#
#   loadtest/run.sh            the full run (make loadtest): 60 s per script
#   loadtest/run.sh --short    about 10 s per script (make test, CI)
#
# 1. seckill.js: the flash sale under an open model of buyers;
# 2. locks.js: many clients contending for a few keys with wait_ms, as plain,
#    read-write and counting locks;
# 3. chaos: seckill.js again while one instance is killed (SIGKILL) midway;
#    nginx routes around it, the invariants still hold, and only requests in
#    flight on that instance may fail;
# 4. segmented: seckill.js on a sale over three segments, on a three-master
#    Redis Cluster behind its own nginx and three instances (about 30 s more,
#    in --short too): besides the invariants above, once the load stops new
#    buyers take the rest, and the whole stock must sell (no unit stranded
#    in a segment) and every instance must answer sold-out.
# Two order hand-off workers (`lockgate orders`) store every sale's orders
# in a PostgreSQL of the run's own meanwhile; once they drained, every sale
# must reconcile (rows = orders, units = sold, nothing pending) and every
# order answered 201 must be a row, no buyer above the cap.
# Summaries (k6 JSON) and k6's HTML report of each run (its web dashboard,
# exported when the run ends: NAME.html, to open in a browser) land in
# $LOADTEST_OUT (default .run/loadtest). LOCKGATE_BIN runs that binary
# instead of building target/release/lockgate.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds=60
rate=600
if [ "${1:-}" = "--short" ]; then
  seconds=10
  rate=300
fi
out="${LOADTEST_OUT:-$root/.run/loadtest}"
mkdir -p "$out"

"$root/scripts/ensure-tools.sh" rust redis nginx k6 postgresql
if [ -z "${LOCKGATE_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate)
fi
export LOCKGATE_BIN="${LOCKGATE_BIN:-$root/target/release/lockgate}"

CLUSTER_DIR="$(mktemp -d)"
export CLUSTER_DIR CLUSTER_PORT=auto
export LOCKGATE_ADMIN_TOKEN="loadtest-$RANDOM$RANDOM"
export LOCKGATE_BUYER_JWT_SECRET="buyers-$RANDOM$RANDOM"
trap '"$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR"' EXIT
# k6 reaches nginx over TLS (HTTP/2) with a CA made for the run, which k6
# (Go) trusts by SSL_CERT_FILE; LOADTEST_TLS=0 for plain HTTP.
tls_dir=""
if [ "${LOADTEST_TLS:-1}" != 0 ]; then
  tls_dir="$CLUSTER_DIR/certs"
  "$root/scripts/make-certs.sh" "$tls_dir" >/dev/null
  export SSL_CERT_FILE="$tls_dir/ca.pem"
fi
CLUSTER_TLS_DIR="$tls_dir" "$root/scripts/cluster.sh" start
# shellcheck source=/dev/null
source "$CLUSTER_DIR/ports.env"

# PostgreSQL for the order hand-off.
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
# (Beside the cluster's directory, which only root may enter.)
pg_dir="$(mktemp -d)"
start_postgres "$pg_dir"
database="$pg_url"
workers=()
for consumer in orders-1 orders-2; do
  RUST_LOG=warn "$LOCKGATE_BIN" orders --database "$database" --consumer "$consumer" \
    --redis-url "redis://127.0.0.1:$REDIS_PORT" >"$CLUSTER_DIR/$consumer.log" 2>&1 &
  workers+=("$!")
done
stop_orders() {
  kill "${workers[@]}" 2>/dev/null || true
  stop_postgres "$pg_dir"
}
trap 'stop_orders; "$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR" "$pg_dir"' EXIT

export BASE_URL="$CLUSTER_URL"
export ADMIN_TOKEN="$LOCKGATE_ADMIN_TOKEN"
export BUYER_JWT_SECRET="$LOCKGATE_BUYER_JWT_SECRET"
export RECORD_REDIS="redis://127.0.0.1:$REDIS_PORT"
export DURATION="${seconds}s"

status=0
run_k6() {
  local name="$1"; shift
  echo "== $name" >&2
  # The dashboard serves nothing (port -1): it only writes the report. It
  # samples every second, since k6 skips the report of a run shorter than
  # a few samples (its default is one per 10 s).
  rm -f "$out/$name.html"
  if ! env K6_WEB_DASHBOARD=true K6_WEB_DASHBOARD_PORT=-1 K6_WEB_DASHBOARD_PERIOD=1s \
    K6_WEB_DASHBOARD_EXPORT="$out/$name.html" "$@" \
    k6 run --quiet "$root/loadtest/${name%%-*}.js" 2> >(grep -v 'level=warn' >&2); then
    echo "== $name FAILED" >&2
    status=1
  fi
  if [ ! -s "$out/$name.html" ]; then
    echo "== $name: k6 wrote no HTML report" >&2
    status=1
  fi
}

run_k6 seckill SKU=k6-sale RATE="$rate" SUMMARY_FILE="$out/seckill.json"
run_k6 locks RUN_ID=locks SUMMARY_FILE="$out/locks.json"

# Chaos: kill gw-2 at 40% of the run. Requests in flight on it then fail
# (nginx answers 503 for them); allow as many as the load can have in flight.
( sleep "$(( seconds * 2 / 5 ))"; kill -9 "$(cat "$CLUSTER_DIR/gw-2.pid")"; echo "== killed gw-2" >&2 ) &
killer=$!
run_k6 seckill-chaos SKU=k6-chaos RATE="$rate" MAX_FAILED=25 SUMMARY_FILE="$out/seckill-chaos.json"
wait "$killer"

# The hand-off: drained, every sale reconciles, every 201 is a row.
echo "== orders in PostgreSQL" >&2
reconciled=no
for _ in $(seq 1 60); do
  if "$LOCKGATE_BIN" orders reconcile --database "$database" \
    --redis-url "redis://127.0.0.1:$REDIS_PORT" >"$out/reconcile.txt" 2>&1 \
    && ! grep -q " pending=[1-9]" "$out/reconcile.txt"; then
    reconciled=yes
    break
  fi
  sleep 0.5
done
cat "$out/reconcile.txt" >&2
if [ "$reconciled" != yes ]; then
  echo "== orders: the sales do not reconcile" >&2
  status=1
fi
psql_query() { psql -X -q -t -A -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "$1"; }
for sku in k6-sale k6-chaos; do
  created="$(redis-cli -p "$REDIS_PORT" SMEMBERS "k6:seckill:$sku:created" | sort)"
  stored="$(psql_query "SELECT order_id FROM orders WHERE sku = '$sku'" | sort)"
  missing="$(comm -23 <(printf '%s\n' "$created" | sed '/^$/d') <(printf '%s\n' "$stored" | sed '/^$/d') | wc -l)"
  over="$(psql_query "SELECT count(*) FROM (SELECT user_id FROM orders WHERE sku = '$sku' AND sale_epoch = (SELECT max(sale_epoch) FROM orders WHERE sku = '$sku') GROUP BY user_id HAVING sum(quantity) > ${CAP:-2}) over_cap")"
  echo "== orders of $sku: $(printf '%s\n' "$stored" | sed '/^$/d' | wc -l) rows; 201s not stored: $missing; buyers over the cap: $over" >&2
  if [ "$missing" -ne 0 ] || [ "$over" -ne 0 ]; then
    status=1
  fi
done

# The segmented sale, on a Redis Cluster of its own (the single Redis
# above keeps what k6 records).
echo "== a Redis Cluster for the segmented sale" >&2
segmented_dir="$(mktemp -d)"
trap 'stop_orders; "$root/scripts/cluster.sh" stop; CLUSTER_DIR="$segmented_dir" "$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR" "$pg_dir" "$segmented_dir"' EXIT
CLUSTER_DIR="$segmented_dir" REDIS_MODE=cluster CLUSTER_PORT=auto "$root/scripts/cluster.sh" start
segmented_port="$(. "$segmented_dir/ports.env"; echo "$CLUSTER_PORT")"
run_k6 seckill-segmented SKU=k6-segmented SEGMENTS=3 RATE="$rate" BASE_URL="http://127.0.0.1:$segmented_port" \
  INSTANCE_URLS="http://127.0.0.1:$((segmented_port + 1)),http://127.0.0.1:$((segmented_port + 2)),http://127.0.0.1:$((segmented_port + 3))" \
  SUMMARY_FILE="$out/seckill-segmented.json"

if [ "$status" -eq 0 ]; then
  echo "load tests passed; summaries and HTML reports in $out" >&2
else
  echo "load tests FAILED; logs in $CLUSTER_DIR were removed, summaries in $out" >&2
fi
exit "$status"
