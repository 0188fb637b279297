#!/usr/bin/env bash
# lockgate's fault harness: hosts made of network namespaces, faults across
# the network between them, a recorded history and a checker (chaos/README.md).
#
#   chaos/run.sh                  every scenario (make chaos)
#   chaos/run.sh --short          four scenarios, shorter (make test)
#   chaos/run.sh --only NAME,...  the scenarios named (--list names them);
#                                 with --short, with the short run's timing
#   chaos/run.sh --random MINUTES [--seed N]
#                                 faults drawn at random for MINUTES (make chaos
#                                 RANDOM=N); CHAOS_RANDOM and CHAOS_SEED say the same
#   chaos/run.sh --cleanup        remove what a run killed with SIGKILL left behind
#
# Needs root (network namespaces, iptables). Installs what is missing:
# redis-server, redis-sentinel, iptables, PostgreSQL, a C compiler (apt-get)
# and chaos/requirements.txt (pip, into .run/chaos-venv).
# LOCKGATE_BIN names the gateway binary; unset, target/release/lockgate is
# built with cargo first. Writes .run/chaos/results.md and a timeline per
# scenario (.run/chaos/<scenario>.svg), with histories and logs beside them
# (CHAOS_OUT moves them). Exits non-zero when a property a scenario must
# hold broke, a scenario saw no activity where it needed some, or the
# harness failed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${CHAOS_OUT:-$root/.run/chaos}"
venv="$root/.run/chaos-venv"

say() { printf 'chaos: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  say "needs root: network namespaces and iptables (run it with sudo)"
  exit 2
fi

ensure_packages() {
  local need=()
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
  command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
  [ "${#need[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || { say "missing: ${need[*]} (install them)"; exit 2; }
  say "installing ${need[*]} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

ensure_venv() {
  # Rebuilt when chaos/requirements.txt changes.
  if ! cmp -s "$root/chaos/requirements.txt" "$venv/.requirements" 2>/dev/null; then
    say "installing chaos/requirements.txt into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/chaos/requirements.txt"
    cp "$root/chaos/requirements.txt" "$venv/.requirements"
  fi
}

export PYTHONPATH="$root/chaos" PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the tree
harness() { "$venv/bin/python" -m harness "$@"; }

ensure_packages
ensure_venv

if [ "${1:-}" = "--cleanup" ]; then
  harness cleanup --stale
  exit 0
fi
if [ "${1:-}" = "--list" ]; then
  harness list
  exit 0
fi

args=("$@")
if [ -n "${CHAOS_RANDOM:-}" ]; then
  args+=(--random "$CHAOS_RANDOM")
  [ -n "${CHAOS_SEED:-}" ] && args+=(--seed "$CHAOS_SEED")
fi

if [ -z "${LOCKGATE_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate)
  LOCKGATE_BIN="$root/target/release/lockgate"
fi

# The runner runs in the background so that a SIGTERM sent to this script
# reaches it at once (bash defers traps while a foreground child runs). It
# is started directly, not through the function above, so that $! is its
# own pid: the run's id, and what the signal must reach. It takes its hosts
# down itself; the cleanup below catches anything left.
"$venv/bin/python" -m harness run --binary "$LOCKGATE_BIN" --python "$venv/bin/python" --out "$out" "${args[@]}" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' INT TERM
status=0
wait "$pid" || status=$?
# A trapped signal ends `wait` early; wait again for the runner's own end.
while kill -0 "$pid" 2>/dev/null; do
  status=0
  wait "$pid" || status=$?
done
harness cleanup --run "$pid" >&2 || true
exit "$status"
