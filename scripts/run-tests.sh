#!/usr/bin/env bash
# Runs the test suite, or only the tests of the api binary whose names start
# with the given module paths:
#   scripts/run-tests.sh                     every test
#   scripts/run-tests.sh locks:: seckill::   the api tests of those modules
# cargo-nextest runs each test in its own process, in parallel; plain `cargo
# test` is the fallback where it is not installed.
#
# The tests start their own servers (redis-server, nginx, the gateway, ...)
# and must stop every one: the run fails when a process of theirs is still
# alive afterwards (it is then killed, so later runs start clean). The tests
# run in a session of their own, which every process they start stays in
# (orphaned or not): that is how theirs are told from anything else running
# on the machine.
set -euo pipefail
cargo="${CARGO:-cargo}"

# The processes still in session $1, one pid per line.
in_session() {
  ps -eo pid=,sid= | awk -v session="$1" '$2 == session {print $1}'
}

run() {
  if "$cargo" nextest --version >/dev/null 2>&1; then
    if [ $# -eq 0 ]; then
      "$cargo" nextest run --locked --no-fail-fast
      return
    fi
    local filter=""
    for module in "$@"; do filter="${filter:+$filter | }test(/^${module}/)"; done
    "$cargo" nextest run --locked --no-fail-fast -E "binary(api) & ($filter)"
    return
  fi
  if [ $# -eq 0 ]; then
    "$cargo" test --locked --no-fail-fast
    return
  fi
  "$cargo" test --locked --no-fail-fast --test api -- "$@"
}

if [ "${1:-}" = "--in-session" ]; then
  shift
  run "$@"
  exit
fi
status=0
setsid "$0" --in-session "$@" &
session=$!
wait "$session" || status=$?
# A server stopping as its test ended may take a moment to go.
left=""
for _ in $(seq 50); do
  left="$(in_session "$session")"
  [ -z "$left" ] && break
  sleep 0.1
done
if [ -n "$left" ]; then
  echo "the tests left these processes running:" >&2
  # shellcheck disable=SC2086
  ps -o pid=,ppid=,args= -p $(echo $left) >&2 || true
  # shellcheck disable=SC2086
  kill -9 $left 2>/dev/null || true
  status=1
fi
exit "$status"
