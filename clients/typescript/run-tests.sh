#!/usr/bin/env bash
# Runs the TypeScript client's tests against the real gateway binary and a
# real redis-server: installs the locked dependencies when they are missing
# or out of date, builds, then runs `npm test`.
#
# Needs node (20 or newer), npm and redis-server on PATH. LOCKGATE_BIN names
# the gateway binary; by default the repository's release build.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export LOCKGATE_BIN="${LOCKGATE_BIN:-$repo/target/release/lockgate}"

missing() {
  echo "run-tests.sh: $1 is not installed ($2)" >&2
  exit 1
}
command -v node >/dev/null || missing node "Node.js 20 or newer; Debian: apt-get install nodejs npm"
command -v npm >/dev/null || missing npm "Debian: apt-get install npm"
command -v redis-server >/dev/null || missing redis-server "Debian: apt-get install redis-server"
command -v redis-cli >/dev/null || missing redis-cli "Debian: apt-get install redis-tools"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if (( node_major < 20 )); then
  echo "run-tests.sh: Node.js 20 or newer is needed, found $(node --version)" >&2
  exit 1
fi
if [[ ! -x "$LOCKGATE_BIN" ]]; then
  echo "run-tests.sh: no gateway binary at $LOCKGATE_BIN (build it with cargo build --release, or set LOCKGATE_BIN)" >&2
  exit 1
fi

cd "$here"
# node_modules is current when it was installed from this very lock file.
lock_hash="$(sha256sum package-lock.json | cut -d' ' -f1)"
stamp="node_modules/.installed-from-lock"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$lock_hash" ]]; then
  npm ci --no-audit --no-fund
  echo "$lock_hash" > "$stamp"
fi

npm run --silent build
npm test
