#!/usr/bin/env bash
# Tests the alert rules and the dashboard (ops/), in two steps:
#   1. promtool check rules and promtool test rules (ops/prometheus);
#   2. live: a Redis, three gateways on it (one serving HTTPS with a
#      certificate made now, one running the order hand-off into SQLite with
#      a sale), and a Prometheus server scraping them every second as the job
#      lockgate with the rules loaded; a short load moves the series, then
#      every rule's expression and every dashboard target is evaluated
#      through Prometheus's HTTP API (scripts/observability.py). A rule or a
#      panel that names a series no gateway exposes fails the test, naming it.
#
#   scripts/test-observability.sh
#
# Settings (environment): LOCKGATE_BIN, the gateway to run
# (target/debug/lockgate); LOAD_SECONDS, how long the load runs (20).
# Needs redis-server, prometheus and promtool (scripts/ensure-tools.sh redis
# prometheus), openssl, curl and python3.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

lockgate="${LOCKGATE_BIN:-$root/target/debug/lockgate}"
load_seconds="${LOAD_SECONDS:-20}"
rules="$root/ops/prometheus/lockgate-rules.yml"
rule_tests="$root/ops/prometheus/lockgate-rules.test.yml"
dashboard="$root/ops/grafana/lockgate.json"
runbook="$root/docs/alerts.md"
admin_token=observability-admin
started=$SECONDS

say() { printf 'test-observability: %s\n' "$*" >&2; }

for tool in redis-server prometheus promtool openssl curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool is missing (scripts/ensure-tools.sh redis prometheus)"; exit 1; }
done
[ -x "$lockgate" ] || { say "no gateway binary at $lockgate (cargo build, or set LOCKGATE_BIN)"; exit 1; }

# --- 1. promtool --------------------------------------------------------
promtool check rules "$rules" >/dev/null
(cd "$(dirname "$rule_tests")" && promtool test rules "$(basename "$rule_tests")") >/dev/null
python3 -m json.tool "$dashboard" >/dev/null
say "promtool: rules valid, unit tests pass"

# --- 2. live ------------------------------------------------------------
scratch
passed=no
scratch_extra() {
  if [ "$passed" = no ]; then
    for log in "$work"/*.log; do
      [ -s "$log" ] || continue
      say "last lines of $(basename "$log"):"
      tail -n 15 "$log" >&2
    done
  fi
}

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for redis-cli -p "$redis_port" ping

"$root/scripts/make-certs.sh" "$work/certs" >/dev/null

# gw-1 plain; gw-2 over HTTPS; gw-3 plain with the order hand-off.
touch "$work/orders.db"
ports=()
for n in 1 2 3; do
  port="$(free_port)"
  ports+=("$port")
  flags=(serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$redis_port" --instance-id "gw-$n")
  case $n in
    2) flags+=(--tls-cert "$work/certs/server.pem" --tls-key "$work/certs/server-key.pem") ;;
    3) flags+=(--orders-database "sqlite://$work/orders.db") ;;
  esac
  LOCKGATE_ADMIN_TOKEN="$admin_token" "$lockgate" "${flags[@]}" >"$work/gw-$n.log" 2>&1 &
  pids+=($!)
done
gw1="http://127.0.0.1:${ports[0]}"
gw2="https://127.0.0.1:${ports[1]}"
gw3="http://127.0.0.1:${ports[2]}"
for url in "$gw1" "$gw2" "$gw3"; do
  wait_for curl -sf --cacert "$work/certs/ca.pem" "$url/readyz"
done

prom_port="$(free_port)"
prometheus_url="http://127.0.0.1:$prom_port"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $rules
scrape_configs:
  - job_name: lockgate
    tls_config:
      ca_file: $work/certs/ca.pem
    static_configs:
      - targets: ["127.0.0.1:${ports[0]}", "127.0.0.1:${ports[2]}"]
      - targets: ["127.0.0.1:${ports[1]}"]
        labels:
          __scheme__: https
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_for curl -sf "$prometheus_url/-/ready"
python3 "$root/scripts/observability.py" targets "$prometheus_url" 3

python3 "$root/scripts/observability.py" load "$load_seconds" "$work/certs/ca.pem" "$admin_token" \
  "$gw3" "$gw1" "$gw2" "$gw3" >&2
# Two more scrapes, and a round of the rules, after the last request.
sleep 3

summary="$(python3 "$root/scripts/observability.py" check "$prometheus_url" "$rules" "$dashboard" "$runbook")"
passed=yes
say "$summary; against 3 gateways (one over HTTPS, one with the hand-off) in $((SECONDS - started)) s"
