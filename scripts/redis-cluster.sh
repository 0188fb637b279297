#!/usr/bin/env bash
# A local three-master Redis Cluster on loopback, with the shipped
# redis/redis.conf (AOF, appendfsync always) on each node.
#
#   scripts/redis-cluster.sh start <dir> [base port]   prints the seed URLs
#   scripts/redis-cluster.sh stop <dir>
#
# The nodes listen on base..base+2 (and their cluster buses 10 000 higher);
# without a base port, free ones are picked. A master that stops takes only
# its own slots with it (cluster-require-full-coverage no). REDIS_EXTRA_ARGS
# adds flags to every node (the benchmark turns persistence off).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
command="${1:-}"
dir="${2:?usage: $0 start|stop <dir> [base port]}"

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

# A base port such that three ports and their bus ports are free.
free_base() { python3 "$root/scripts/free-ports.py" 3 --bus; }

start() {
  local base="${1:-$(free_base)}" ports=() port
  for n in 0 1 2; do
    port=$((base + n))
    ports+=("$port")
    mkdir -p "$dir/node-$port"
    redis-server "$root/redis/redis.conf" --port "$port" --dir "$dir/node-$port" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --cluster-require-full-coverage no ${REDIS_EXTRA_ARGS:-} \
      --logfile "$dir/node-$port.log" --daemonize no >/dev/null 2>&1 &
    echo $! >"$dir/node-$port.pid"
  done
  for port in "${ports[@]}"; do wait_for redis-cli -p "$port" ping; done
  # A restart finds its nodes.conf and rejoins; only a new cluster is created.
  if ! redis-cli -p "${ports[0]}" cluster info | grep -q 'cluster_slots_assigned:16384'; then
    redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
  fi
  for port in "${ports[@]}"; do
    wait_for sh -c "redis-cli -p $port cluster info | grep -q cluster_state:ok"
  done
  local urls=("${ports[@]/#/redis://127.0.0.1:}")
  (IFS=,; echo "${urls[*]}")
}

stop() {
  stop_pidfiles "$dir"/node-*.pid
}

case "$command" in
  start) start "${3:-}" ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop <dir> [base port]" >&2; exit 2 ;;
esac
