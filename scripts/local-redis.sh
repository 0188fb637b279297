#!/usr/bin/env bash
# Makes sure a Redis answers on 127.0.0.1:${REDIS_PORT:-6379}; when none does,
# starts one in the background with redis/redis.conf (AOF, appendfsync
# always), its data and log under .run/redis-<port>/.
set -euo pipefail

port="${REDIS_PORT:-6379}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.run/redis-$port"

if redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
  echo "local-redis: Redis already answers on 127.0.0.1:$port"
  exit 0
fi

mkdir -p "$dir"
redis-server "$root/redis/redis.conf" --port "$port" --dir "$dir" \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
for _ in $(seq 50); do
  redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && {
    echo "local-redis: started Redis on 127.0.0.1:$port (data and log in .run/redis-$port)"
    exit 0
  }
  sleep 0.1
done
echo "local-redis: Redis did not start; see $dir/redis.log" >&2
exit 1
