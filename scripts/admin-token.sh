#!/usr/bin/env bash
# Prints the admin token `make run` starts the gateway with: the one kept in
# .run/admin-token, made at the first start (sale administration is refused
# without one). Says on stderr how to use it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
file="$root/.run/admin-token"

if [ ! -s "$file" ]; then
  mkdir -p "$root/.run"
  (umask 077; od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$file")
  echo "admin-token: made a new admin token in .run/admin-token" >&2
fi
cat >&2 <<'USAGE'
admin-token: sale administration needs the token in .run/admin-token, e.g.
  curl -XPUT localhost:8080/seckill/phone -H "Authorization: Bearer $(cat .run/admin-token)" \
    -H 'content-type: application/json' -d '{"stock": 100, "per_user_limit": 2}'
USAGE
cat "$file"
