#!/usr/bin/env bash
# Runs the TypeScript client's tests against the real gateway binary and a
# real redis-server: installs the locked dependencies when they are missing
# or out of date, builds, then runs `npm test`.
#
# Needs node (20.10 or newer, for the test runner's --test-concurrency; the
# library itself needs 20.4), npm and redis-server on PATH. LOCKGATE_BIN
# names the gateway binary; by default the repository's release build.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export LOCKGATE_BIN="${LOCKGATE_BIN:-$repo/target/release/lockgate}"

missing() {
  echo "run-tests.sh: $1 is not installed ($2)" >&2
  exit 1
}
command -v node >/dev/null || missing node "Node.js 20.10 or newer; Debian: apt-get install nodejs npm"
command -v npm >/dev/null || missing npm "Debian: apt-get install npm"
command -v redis-server >/dev/null || missing redis-server "Debian: apt-get install redis-server"
command -v redis-cli >/dev/null || missing redis-cli "Debian: apt-get install redis-tools"
if ! node -e 'const [major, minor] = process.versions.node.split(".").map(Number); process.exit(major > 20 || (major === 20 && minor >= 10) ? 0 : 1)'; then
  echo "run-tests.sh: Node.js 20.10 or newer is needed, found $(node --version)" >&2
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
