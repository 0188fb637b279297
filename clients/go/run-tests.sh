#!/usr/bin/env bash
# Runs the Go client's checks and tests against the real gateway binary and
# a real redis-server: go vet, gofmt, then `go test -race ./...`, offline
# (the module uses the standard library only).
#
# Needs go (Debian's golang-go, 1.19 or newer) and redis-server on PATH.
# LOCKGATE_BIN names the gateway binary; by default the repository's
# release build. Extra arguments go to `go test` (e.g. -run Watch -v).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export LOCKGATE_BIN="${LOCKGATE_BIN:-$repo/target/release/lockgate}"

missing() {
  echo "run-tests.sh: $1 is not installed ($2)" >&2
  exit 1
}
command -v go >/dev/null || missing go "Debian: apt-get install golang-go"
command -v gofmt >/dev/null || missing gofmt "Debian: apt-get install golang-go"
# -race needs cgo, and so a C compiler.
command -v "$(go env CC)" >/dev/null || missing "$(go env CC)" "go test -race needs it; Debian: apt-get install gcc"
command -v redis-server >/dev/null || missing redis-server "Debian: apt-get install redis-server"
command -v redis-cli >/dev/null || missing redis-cli "Debian: apt-get install redis-tools"
if [[ ! -x "$LOCKGATE_BIN" ]]; then
  echo "run-tests.sh: no gateway binary at $LOCKGATE_BIN (build it with cargo build --release, or set LOCKGATE_BIN)" >&2
  exit 1
fi

# No module is ever downloaded: go.mod requires nothing.
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
cd "$here"
go vet ./...
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
  echo "run-tests.sh: not gofmt-formatted (run gofmt -w .):" >&2
  echo "$unformatted" >&2
  exit 1
fi
go test -race -count=1 "$@" ./...
