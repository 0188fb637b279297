# Helpers shared by lockgate's scripts: . "$root/scripts/lib.sh"

lib_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# scratch: a fresh directory in $work and an empty $pids for the script's
# background processes; at exit every process in pids is killed and waited
# for, then the script's own scratch_extra (if it defines one) runs, and the
# directory goes.
scratch() {
  work="$(mktemp -d)"
  pids=()
  trap scratch_cleanup EXIT
}
scratch_cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F scratch_extra >/dev/null; then scratch_extra; fi
  rm -rf "$work"
}

# wait_for CMD...: retries CMD quietly for up to 20 s.
wait_for() {
  for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timed out waiting for: $*" >&2
  return 1
}

# stop_pidfiles FILE...: ends the process each pid file names, waits until it
# is gone, and removes the file. The processes need not be children of this
# shell (`wait` cannot see them), hence the polling: a restart must not find
# the old Redis still writing its AOF.
stop_pidfiles() {
  local pidfile pid
  for pidfile in "$@"; do
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    rm -f "$pidfile"
  done
}

# free_port: a loopback port nobody listens on.
free_port() { python3 "$lib_dir/free-ports.py" 1; }

# field JSON NAME: one field of a JSON object.
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# cpu_ms PID: the CPU the process has used so far, in milliseconds (0 once
# it is gone).
cpu_ms() { awk '{print ($14 + $15) * 10}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# start_postgres DIR: a throwaway PostgreSQL (Debian's initdb and pg_ctl,
# run as the postgres user when root) with its data in DIR (whose parent
# that user can enter), on a free port; sets pg_port and pg_url, and
# stop_postgres DIR stops it at once.
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_bin() { ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1; }
start_postgres() {
  local dir="$1" port
  port="$(free_port)"
  mkdir -p "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres:postgres "$dir"
  as_postgres "$(pg_bin)/initdb" -A trust -U postgres --no-sync -D "$dir/data" >/dev/null
  as_postgres "$(pg_bin)/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null
  pg_port="$port"
  pg_url="postgres://postgres@127.0.0.1:$port/postgres"
}
stop_postgres() { as_postgres "$(pg_bin)/pg_ctl" -D "$1/data" -m immediate stop >/dev/null 2>&1 || true; }
