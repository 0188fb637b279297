#!/usr/bin/env bash
# A rolling upgrade under load, behind nginx: three gateways of the previous
# release (built from the history by scripts/build-release.sh) on one Redis,
# k6 running the flash sale (seckill.js) and the lock contention (locks.js)
# through nginx meanwhile; each instance is replaced by this build one at a
# time as docs/operations.md says (SIGTERM, start the new one in its place,
# wait for /readyz), then one is rolled back to the previous release.
# Fails when an invariant breaks: the k6 thresholds (nothing oversold, no
# buyer over the cap, no hold against a lock's rules, fencing tokens never
# backwards), an answer other than those the procedure allows (503 from a
# draining instance, counted against MAX_FAILED), any other 5xx in nginx's
# log, or an instance still running 30 s after its SIGTERM.
#
#   loadtest/upgrade/run.sh          (make upgrade)
#
# Settings: NGINX_DRAIN (1: take an instance out of nginx by a reload before its
# SIGTERM; 0, the default: the SIGTERM alone), DURATION_S (the load's length, 60), RATE (the sale's attempts per
# second, 300), MAX_FAILED (answers tolerated, 60), UPGRADE_FROM (0.1.0),
# LOCKGATE_BIN (this build; default target/release/lockgate, built),
# LOADTEST_OUT (k6 summaries, .run/upgrade).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
seconds="${DURATION_S:-60}"
rate="${RATE:-300}"
max_failed="${MAX_FAILED:-60}"
out="${LOADTEST_OUT:-$root/.run/upgrade}"
mkdir -p "$out"

"$root/scripts/ensure-tools.sh" rust redis nginx k6
old_bin="$("$root/scripts/build-release.sh" "${UPGRADE_FROM:-0.1.0}")"
if [ -z "${LOCKGATE_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate)
fi
new_bin="${LOCKGATE_BIN:-$root/target/release/lockgate}"
say() { printf 'upgrade: %s\n' "$*" >&2; }
say "from $("$old_bin" --version | head -n 1) to $("$new_bin" --version | head -n 1)"

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
CLUSTER_DIR="$(mktemp -d)"
export CLUSTER_DIR CLUSTER_PORT=auto
export LOCKGATE_ADMIN_TOKEN="upgrade-$RANDOM$RANDOM"
export LOCKGATE_BUYER_JWT_SECRET="buyers-$RANDOM$RANDOM"
trap '"$root/scripts/cluster.sh" stop; rm -rf "$CLUSTER_DIR"' EXIT
LOCKGATE_BIN="$old_bin" "$root/scripts/cluster.sh" start
# shellcheck source=/dev/null
source "$CLUSTER_DIR/ports.env"

# Instance n as scripts/cluster.sh starts it, of binary $2.
start_instance() {
  local n="$1" binary="$2"
  RUST_LOG=warn "$binary" serve \
    --listen "127.0.0.1:$((CLUSTER_PORT + n))" --instance-id "gw-$n" \
    --redis-url "redis://127.0.0.1:$REDIS_PORT" \
    --admin-token "$LOCKGATE_ADMIN_TOKEN" --trusted-proxies 127.0.0.1 \
    >>"$CLUSTER_DIR/gw-$n.log" 2>&1 &
  echo $! >"$CLUSTER_DIR/gw-$n.pid"
  wait_for curl -sf "http://127.0.0.1:$((CLUSTER_PORT + n))/readyz"
}

# Takes instance n out of nginx's upstreams (down) or puts it back (up), by
# a reload: nginx's new workers send it nothing, its old ones finish what
# they have in flight.
nginx_upstream() {
  local n="$1" state="$2" address="127.0.0.1:$((CLUSTER_PORT + n))"
  if [ "$state" = down ]; then
    sed -i "s|server $address max_fails|server $address down max_fails|" "$CLUSTER_DIR/nginx.conf"
  else
    sed -i "s|server $address down max_fails|server $address max_fails|" "$CLUSTER_DIR/nginx.conf"
  fi
  nginx -p "$CLUSTER_DIR" -c "$CLUSTER_DIR/nginx.conf" -s reload
}

# The rolling procedure for instance n: with NGINX_DRAIN=1
# out of nginx first, a second for what nginx had in flight to it; then
# SIGTERM, wait for its exit (its drain done), the other binary in its
# place, ready, and back in nginx. By default the SIGTERM alone
# (docs/operations.md's steps): a PUT or DELETE that nginx sends to the
# stopping instance gets its one try (nginx's @once) and fails with 503.
replace() {
  local n="$1" binary="$2" pid started=$SECONDS
  pid="$(cat "$CLUSTER_DIR/gw-$n.pid")"
  if [ "${NGINX_DRAIN:-0}" = 1 ]; then
    nginx_upstream "$n" down
    sleep 1
  fi
  kill -TERM "$pid"
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then
    say "gw-$n did not stop within 30 s of SIGTERM"
    return 1
  fi
  start_instance "$n" "$binary"
  [ "${NGINX_DRAIN:-0}" = 1 ] && nginx_upstream "$n" up
  say "gw-$n now $("$binary" --version | head -n 1) (replaced in $((SECONDS - started)) s)"
}

export BASE_URL="$CLUSTER_URL"
export ADMIN_TOKEN="$LOCKGATE_ADMIN_TOKEN"
export BUYER_JWT_SECRET="$LOCKGATE_BUYER_JWT_SECRET"
export RECORD_REDIS="redis://127.0.0.1:$REDIS_PORT"
export DURATION="${seconds}s" MAX_FAILED="$max_failed"

k6_pids=()
run_k6() {
  local name="$1"; shift
  env "$@" SUMMARY_FILE="$out/$name.json" k6 run --quiet "$root/loadtest/$name.js" \
    >"$out/$name.txt" 2> >(grep -v 'level=warn' >"$out/$name.err") &
  k6_pids+=("$!")
}
run_k6 seckill SKU=upgrade-sale RATE="$rate" STOCK=4000 USERS=6000
run_k6 locks RUN_ID=upgrade VUS=10

# Replace the three, then roll one back, spread over the middle of the load.
step=$((seconds / 6))
sleep "$step"
status=0
for n in 1 2 3; do
  replace "$n" "$new_bin" || status=1
  sleep "$step"
done
"$new_bin" format status --redis-url "redis://127.0.0.1:$REDIS_PORT" >"$out/format-status.txt" 2>&1 || status=1
replace 2 "$old_bin" || status=1

for pid in "${k6_pids[@]}"; do wait "$pid" || status=1; done
for name in seckill locks; do
  echo "== $name" >&2
  cat "$out/$name.txt" >&2
  grep -v '^$' "$out/$name.err" | tail -n 20 >&2 || true
done
echo "== lockgate format status after the three replacements" >&2
cat "$out/format-status.txt" >&2

# Every answer nginx gave, by status; 5xx but 503 (a drain) fails the run.
sleep 1.5 # nginx flushes its access log every second
python3 - "$CLUSTER_DIR/nginx-access.log" "$out/seckill.json" "$out/locks.json" <<'PY' || status=1
import collections, json, sys
log, *summaries = sys.argv[1:]
statuses = collections.Counter()
for line in open(log):
    parts = line.split('"')
    if len(parts) > 2 and parts[2].split():
        statuses[parts[2].split()[0]] += 1
print("== nginx answers by status:", dict(sorted(statuses.items())), file=sys.stderr)
for path in summaries:
    metrics = json.load(open(path))["metrics"]
    requests = metrics["http_reqs"]["values"]["count"]
    failed = metrics["http_req_failed"]["values"].get("passes", 0)
    p99 = metrics["http_req_duration"]["values"]["p(99)"]
    unexpected = metrics.get("unexpected_responses", {}).get("values", {}).get("count", 0)
    print(f"== {path.rsplit('/', 1)[-1]}: {requests} requests, {failed} failed by k6's status rule, "
          f"{unexpected} unexpected, p99 {p99:.1f} ms", file=sys.stderr)
bad = {s: n for s, n in statuses.items() if s.startswith("5") and s != "503"}
if bad:
    print(f"== 5xx other than 503: {bad}", file=sys.stderr)
    sys.exit(1)
PY

if [ "$status" -eq 0 ]; then
  say "passed; k6 summaries in $out"
else
  say "FAILED; k6 summaries in $out"
fi
exit "$status"
