#!/usr/bin/env bash
# The mixed-version tests (tests/upgrade.rs): builds the previous release
# from the history (scripts/build-release.sh, cached), then runs the tests
# whose names contain FILTER with it.
#
#   tests/upgrade/run.sh short_     the short form (make upgrade-short)
#   tests/upgrade/run.sh            every mixed-version test
#
# UPGRADE_FROM names the previous release (0.1.0).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cargo="${CARGO:-cargo}"
started=$SECONDS
LOCKGATE_OLD_BIN="$("$root/scripts/build-release.sh" "${UPGRADE_FROM:-0.1.0}")"
export LOCKGATE_OLD_BIN
echo "upgrade: previous release ready after $((SECONDS - started)) s: $("$LOCKGATE_OLD_BIN" --version)" >&2
cd "$root"
if "$cargo" nextest --version >/dev/null 2>&1; then
  "$cargo" nextest run --locked --no-fail-fast --test upgrade --run-ignored only ${1:+"$1"}
else
  "$cargo" test --locked --no-fail-fast --test upgrade -- --ignored ${1:+"$1"}
fi
