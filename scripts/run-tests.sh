#!/usr/bin/env bash
# Runs the test suite, or only the tests of the api binary whose names start
# with the given module paths:
#   scripts/run-tests.sh                     every test
#   scripts/run-tests.sh locks:: seckill::   the api tests of those modules
# cargo-nextest runs each test in its own process, in parallel; plain `cargo
# test` is the fallback where it is not installed.
set -euo pipefail
cargo="${CARGO:-cargo}"

if "$cargo" nextest --version >/dev/null 2>&1; then
  if [ $# -eq 0 ]; then
    exec "$cargo" nextest run --locked --no-fail-fast
  fi
  filter=""
  for module in "$@"; do filter="${filter:+$filter | }test(/^${module}/)"; done
  exec "$cargo" nextest run --locked --no-fail-fast -E "binary(api) & ($filter)"
fi
if [ $# -eq 0 ]; then
  exec "$cargo" test --locked --no-fail-fast
fi
exec "$cargo" test --locked --no-fail-fast --test api -- "$@"
