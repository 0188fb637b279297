#!/usr/bin/env bash
# The console's tests: unit tests of its pure parts, the check that dist/ is
# what a fresh build makes, and the browser tests (Debian's Chromium driven
# by playwright-core) against the real gateway binary and a real
# redis-server, both started on free ports and stopped after.
#
#   console/run-tests.sh                 # LOCKGATE_BIN defaults to target/release/lockgate
#   LOCKGATE_BIN=/path/to/lockgate console/run-tests.sh
#
# Installs what is missing: the npm packages from the committed lockfile
# (npm ci, only when the lockfile changed since the last install) and, on
# Debian or Ubuntu, Chromium with apt-get (scripts/ensure-tools.sh). Screenshots go to .run/console/.
set -euo pipefail

say() { printf 'console tests: %s\n' "$*" >&2; }

cd "$(dirname "$0")"
repo=$(cd .. && pwd)
export LOCKGATE_BIN="${LOCKGATE_BIN:-$repo/target/release/lockgate}"
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$LOCKGATE_BIN" ]; then
  say "no gateway binary at $LOCKGATE_BIN: run cargo build --release first, or set LOCKGATE_BIN"
  exit 1
fi
command -v redis-server >/dev/null 2>&1 || { say "redis-server is missing (apt-get install redis-server)"; exit 1; }

# npm ci wipes node_modules, so run it only when the lockfile is not the one
# installed; after that the tests need no network.
stamp=node_modules/.installed-lockfile
if ! cmp -s package-lock.json "$stamp" 2>/dev/null; then
  say "installing the npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

if [ ! -x "$CHROMIUM" ]; then
  # The project's installer (apt-get on Debian and Ubuntu).
  "$repo/scripts/ensure-tools.sh" chromium
fi

# One file at a time: the browser tests and the build would fight over two cores.
exec node --test --test-concurrency=1 tests/
