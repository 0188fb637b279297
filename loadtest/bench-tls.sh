#!/usr/bin/env bash
# What TLS and permissions cost: uncontended lock cycles per second and the
# gateway's CPU per cycle, over plain HTTP and over TLS, with connections
# kept alive and with a new connection (so a TLS handshake) per cycle; and
# with an API key checked against a permissions file of 1000 rules beside
# the same key under --api-keys alone. All against one Redis, the gateways
# (the same binary) measured in turn in the same run, driven by k6.
#
#   loadtest/bench-tls.sh        (part of: make bench)
#
# BENCH_SECONDS sets each run's length (default 10); LOCKGATE_BIN a gateway
# binary to use instead of building one.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
vus=20
"$root/scripts/ensure-tools.sh" rust redis k6
if [ -z "${LOCKGATE_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate)
  LOCKGATE_BIN="$root/target/release/lockgate"
fi
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

scratch

"$root/scripts/make-certs.sh" "$work/certs" >/dev/null
redis_port="$(free_port)"
redis-server --port "$redis_port" --save '' --appendonly no --daemonize no \
  --logfile "$work/redis.log" &
pids+=($!)
wait_for redis-cli -p "$redis_port" ping

serve() { # serve PORT [FLAGS...]: a gateway on PORT; prints its pid
  local port="$1"
  shift
  "$LOCKGATE_BIN" serve --listen "127.0.0.1:$port" \
    --redis-url "redis://127.0.0.1:$redis_port" "$@" >"$work/gateway-$port.log" 2>&1 &
  echo $!
}
plain_port="$(free_port)"
plain_pid="$(serve "$plain_port")"
pids+=("$plain_pid")
tls_port="$(free_port)"
tls_pid="$(serve "$tls_port" --tls-cert "$work/certs/server.pem" --tls-key "$work/certs/server-key.pem")"
pids+=("$tls_pid")
key="bench-key-$RANDOM$RANDOM"
python3 - "$work/acl.toml" "$(printf %s "$key" | "$LOCKGATE_BIN" acl hash)" <<'PY'
import sys
path, digest = sys.argv[1], sys.argv[2]
rules = [f'  {{ prefix = "svc{n}:part{n % 7}:", allow = ["read"] }},' for n in range(999)]
rules.append('  { prefix = "bench:", allow = ["read", "lock"] },')
open(path, "w").write(f'[principals.bench]\napi_key_sha256 = "{digest}"\nrules = [\n' + "\n".join(rules) + "\n]\n")
PY
keys_port="$(free_port)"
keys_pid="$(serve "$keys_port" --api-keys "$key")"
pids+=("$keys_pid")
acl_port="$(free_port)"
acl_pid="$(serve "$acl_port" --acl-file "$work/acl.toml")"
pids+=("$acl_pid")
wait_for curl -sf "http://127.0.0.1:$plain_port/readyz"
wait_for curl -sf "http://127.0.0.1:$keys_port/readyz"
wait_for curl -sf "http://127.0.0.1:$acl_port/readyz"
wait_for curl -sf --cacert "$work/certs/ca.pem" "https://localhost:$tls_port/readyz"
export SSL_CERT_FILE="$work/certs/ca.pem"

# run NAME URL PID [K6 FLAGS...]: cycles/s and the gateway's CPU per cycle.
run() {
  local name="$1" url="$2" pid="$3"
  shift 3
  local before after rate
  before="$(cpu_ms "$pid")"
  BASE_URL="$url" VUS="$vus" DURATION="${seconds}s" SUMMARY_FILE="$work/$name.json" \
    k6 run --quiet "$@" "$root/loadtest/tls-cycles.js" >"$work/$name.k6.log" 2>&1 ||
    { cat "$work/$name.k6.log" >&2; exit 1; }
  after="$(cpu_ms "$pid")"
  rate="$(field "$(cat "$work/$name.json")" cycles_per_second)"
  python3 -c 'import sys
rate, cpu, seconds = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print(f"{sys.argv[1]:<34} {rate:>9.0f} cycles/s   gateway CPU {cpu * 1000 / max(rate * seconds, 1):6.1f} us/cycle")' \
    "$name" "$rate" "$((after - before))" "$seconds" | tee -a "$work/table"
}

echo "TLS cost: $vus k6 clients, ${seconds} s each, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
run "plain HTTP, kept alive" "http://127.0.0.1:$plain_port" "$plain_pid"
run "TLS, kept alive" "https://localhost:$tls_port" "$tls_pid"
run "plain HTTP, a connection per cycle" "http://127.0.0.1:$plain_port" "$plain_pid" --no-connection-reuse
run "TLS, a handshake per cycle" "https://localhost:$tls_port" "$tls_pid" --no-connection-reuse
API_KEY="$key" run "API key, --api-keys" "http://127.0.0.1:$keys_port" "$keys_pid"
API_KEY="$key" run "API key, 1000-rule permissions" "http://127.0.0.1:$acl_port" "$acl_pid"
python3 - "$work/table" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    name = line[:34].strip()
    rate = float(re.search(r"(\d+) cycles/s", line).group(1))
    rows[name] = rate
kept = rows["TLS, kept alive"] / rows["plain HTTP, kept alive"]
fresh = rows["TLS, a handshake per cycle"] / rows["plain HTTP, a connection per cycle"]
print(f"TLS against plain HTTP: {kept:.2f}x the cycles/s kept alive, {fresh:.2f}x with a handshake per cycle")
acl = rows["API key, 1000-rule permissions"] / rows["API key, --api-keys"]
print(f"1000-rule permissions against --api-keys alone: {acl:.3f}x the cycles/s")
PY
