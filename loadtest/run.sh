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
#    flight on that instance may fail.
# Summaries (k6 JSON) and k6's HTML report of each run (its web dashboard,
# exported when the run ends: NAME.html, to open in a browser) land in
# $LOADTEST_OUT (default .run/loadtest).
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

"$root/scripts/ensure-tools.sh" rust redis nginx k6
(cd "$root" && cargo build --release --locked --quiet --bin lockgate)

CLUSTER_DIR="$(mktemp -d)"
export CLUSTER_DIR CLUSTER_PORT=auto
export LOCKGATE_ADMIN_TOKEN="loadtest-$RANDOM$RANDOM"
export LOCKGATE_BUYER_JWT_SECRET="buyers-$RANDOM$RANDOM"
trap '"$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR"' EXIT
"$root/scripts/cluster.sh" start
# shellcheck source=/dev/null
source "$CLUSTER_DIR/ports.env"

export BASE_URL="http://127.0.0.1:$CLUSTER_PORT"
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

if [ "$status" -eq 0 ]; then
  echo "load tests passed; summaries and HTML reports in $out" >&2
else
  echo "load tests FAILED; logs in $CLUSTER_DIR were removed, summaries in $out" >&2
fi
exit "$status"
