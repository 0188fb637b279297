# Helpers shared by lockgate's scripts: . "$root/scripts/lib.sh"

lib_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

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
