#!/usr/bin/env bash
# Redis (AOF on), three lockgate instances and nginx in front, on loopback.
#
#   scripts/cluster.sh up       in the foreground; Ctrl-C stops everything
#   scripts/cluster.sh start    in the background; `stop` ends it
#   scripts/cluster.sh stop     stops what `start` (or a crashed `up`) left
#
# Settings (environment):
#   CLUSTER_DIR    pids, logs, Redis data, nginx config   (.run/cluster)
#   CLUSTER_PORT   nginx's port; the instances take the next three   (8090)
#   REDIS_PORT     (6380; with REDIS_MODE=cluster, the first of three)
#   REDIS_MODE     single (default) or cluster: a local three-master Redis
#                  Cluster (scripts/redis-cluster.sh) instead of one Redis
#   (CLUSTER_PORT=auto picks free ports for both; `start` writes the ports it
#   used to $CLUSTER_DIR/ports.env either way.)
#   LOCKGATE_ADMIN_TOKEN   admin token of every instance  (cluster-admin)
#   LOCKGATE_BUYER_JWT_SECRET   HS256 secret of the sale's buyer tokens
#                  (cluster-buyers): a purchase needs a JWT whose sub is the buyer
#   NGINX_RATE / NGINX_BURST   nginx's per-client fence   (5000 / 10000)
#   NGINX_READ_TIMEOUT / NGINX_LOCKS_READ_TIMEOUT   how long nginx waits for
#                  an instance's answer, and under /locks   (10s / 70s)
#   GATEWAY_FLAGS  extra flags for every `lockgate serve`
#   CLUSTER_TLS_DIR   nginx serves HTTPS (HTTP/2 and HTTP/1.1) with
#                  server.pem and server-key.pem of this directory, as made
#                  by scripts/make-certs.sh (clients trust its ca.pem)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${CLUSTER_DIR:-$root/.run/cluster}"
port="${CLUSTER_PORT:-8090}"
redis_port="${REDIS_PORT:-6380}"
admin_token="${LOCKGATE_ADMIN_TOKEN:-cluster-admin}"
buyer_secret="${LOCKGATE_BUYER_JWT_SECRET:-cluster-buyers}"
lockgate="${LOCKGATE_BIN:-$root/target/release/lockgate}"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

say() { printf 'cluster: %s\n' "$*" >&2; }

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

# A port such that it and the next three are free.
free_port_block() { python3 "$root/scripts/free-ports.py" 4; }

start() {
  if [ "$port" = auto ]; then
    port="$(free_port_block)"
    # A cluster picks its own ports (with room for their bus ports).
    if [ "${REDIS_MODE:-single}" = cluster ]; then redis_port=""; else redis_port="$(free_port_block)"; fi
  fi
  mkdir -p "$dir"/{redis,tmp/client_body,tmp/proxy,tmp/fastcgi,tmp/uwsgi,tmp/scgi}
  local scheme=http listen="127.0.0.1:$port" tls_curl=()
  if [ -n "${CLUSTER_TLS_DIR:-}" ]; then
    scheme=https listen="127.0.0.1:$port ssl http2" tls_curl=(--cacert "$CLUSTER_TLS_DIR/ca.pem")
    sed -e "s|@TLS_CERT@|$CLUSTER_TLS_DIR/server.pem|" -e "s|@TLS_KEY@|$CLUSTER_TLS_DIR/server-key.pem|" \
      "$root/nginx/client-tls.conf.template" >"$dir/client-tls.conf"
  fi
  printf 'CLUSTER_PORT=%s\nREDIS_PORT=%s\nCLUSTER_URL=%s\n' "$port" "$redis_port" \
    "$scheme://127.0.0.1:$port" >"$dir/ports.env"
  # nginx workers drop to an unprivileged user when started by root.
  chmod -R a+rwx "$dir/tmp"
  [ -x "$lockgate" ] || (cd "$root" && cargo build --release --locked --quiet --bin lockgate)

  local redis_flags
  if [ "${REDIS_MODE:-single}" = cluster ]; then
    redis_flags=(--redis-cluster-nodes "$("$root/scripts/redis-cluster.sh" start "$dir/redis-cluster" "$redis_port")")
  else
    redis-server "$root/redis/redis.conf" --port "$redis_port" --dir "$dir/redis" \
      --logfile "$dir/redis.log" --daemonize no >/dev/null 2>&1 &
    echo $! >"$dir/redis.pid"
    wait_for redis-cli -p "$redis_port" ping
    redis_flags=(--redis-url "redis://127.0.0.1:$redis_port")
  fi

  local flags=()
  read -r -a flags <<<"${GATEWAY_FLAGS:-}"
  for n in 1 2 3; do
    # The secret goes by the environment, not the command line that ps shows.
    RUST_LOG="${RUST_LOG:-warn}" LOCKGATE_BUYER_JWT_SECRET="$buyer_secret" "$lockgate" serve \
      --listen "127.0.0.1:$((port + n))" --instance-id "gw-$n" \
      "${redis_flags[@]}" \
      --admin-token "$admin_token" --trusted-proxies 127.0.0.1 \
      "${flags[@]}" >>"$dir/gw-$n.log" 2>&1 &
    echo $! >"$dir/gw-$n.pid"
  done
  for n in 1 2 3; do wait_for curl -sf "http://127.0.0.1:$((port + n))/readyz"; done

  sed -e "s|@RUN_DIR@|$dir|g" -e "s|@LISTEN@|$listen|g" \
    -e "s|@UPSTREAM_1@|127.0.0.1:$((port + 1))|" \
    -e "s|@UPSTREAM_2@|127.0.0.1:$((port + 2))|" \
    -e "s|@UPSTREAM_3@|127.0.0.1:$((port + 3))|" \
    -e "s|@REQ_RATE@|${NGINX_RATE:-5000}|" -e "s|@REQ_BURST@|${NGINX_BURST:-10000}|" \
    -e "s|@READ_TIMEOUT@|${NGINX_READ_TIMEOUT:-10s}|" \
    -e "s|@LOCKS_READ_TIMEOUT@|${NGINX_LOCKS_READ_TIMEOUT:-70s}|" \
    "$root/nginx/lockgate.conf.template" >"$dir/nginx.conf"
  if [ -n "${CLUSTER_TLS_DIR:-}" ]; then
    sed -i -e "/# @CLIENT_TLS@/r $dir/client-tls.conf" "$dir/nginx.conf"
  fi
  "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' >>"$dir/nginx-error.log" 2>&1 &
  echo $! >"$dir/nginx-master.pid"
  wait_for curl -sf "${tls_curl[@]}" "$scheme://127.0.0.1:$port/readyz"
  say "nginx on $scheme://127.0.0.1:$port in front of gw-1..3 on ports $((port + 1))-$((port + 3)); ${redis_flags[*]}"
  say "admin token: $admin_token; buyer tokens: HS256 JWTs signed with $buyer_secret, sub = the buyer; logs in $dir"
}

stop() {
  stop_pidfiles "$dir"/nginx-master.pid "$dir"/gw-*.pid "$dir"/redis.pid
  if [ -d "$dir/redis-cluster" ]; then "$root/scripts/redis-cluster.sh" stop "$dir/redis-cluster"; fi
}

case "${1:-}" in
  up)
    "$root/scripts/ensure-tools.sh" rust redis nginx
    (cd "$root" && cargo build --release --locked --quiet --bin lockgate)
    stop
    trap 'stop; say stopped' EXIT
    trap 'exit 130' INT TERM
    start
    say "Ctrl-C stops everything"
    wait
    ;;
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 up|start|stop" >&2
    exit 2
    ;;
esac
