#!/usr/bin/env bash
# Contract fuzzing: schemathesis (PyPI) generates requests from the OpenAPI
# document a running gateway serves, against a real Redis, and fails on any
# server error or any response that breaks the document (status, content
# type, headers, body schema).
#
#   scripts/fuzz-contract.sh         (part of make test)
#
# FUZZ_EXAMPLES sets the examples per operation (default 30). The gateway
# runs with an API key and admin token (schemathesis sends both) and a short
# maximum wait, so a generated wait against a held lock stays short. The
# request timeout is short too: a streamed lock and a lock's event stream
# never end by themselves, and schemathesis checks each event it read
# (against the per-event schema) when the timeout ends the stream.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/ensure-tools.sh" rust redis schemathesis
(cd "$root" && cargo build --release --locked --quiet --bin lockgate)

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
scratch

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" >/dev/null 2>&1 &
pids+=($!)
wait_for redis-cli -p "$redis_port" ping

port="$(free_port)"
secret="fuzz-$RANDOM$RANDOM"
RUST_LOG=warn "$root/target/release/lockgate" serve --listen "127.0.0.1:$port" \
  --redis-url "redis://127.0.0.1:$redis_port" --api-keys "$secret" --admin-token "$secret" \
  --max-wait-ms 200 >"$work/gateway.log" 2>&1 &
pids+=($!)
wait_for curl -sf "http://127.0.0.1:$port/readyz"

# schemathesis keeps its state in the working directory: use the temp one.
cd "$work"
# One run per phase, each against an empty Redis: the locks the
# generated requests took (for up to an hour) would otherwise leave every
# later request for the same key a 409, as no client would meet it.
for phases in examples coverage fuzzing stateful; do
  redis-cli -p "$redis_port" FLUSHALL >/dev/null
  echo "fuzzing the contract of a gateway on :$port ($phases)..." >&2
  out="$work/schemathesis-$phases.log"
  if ! schemathesis run "http://127.0.0.1:$port/openapi.json" --phases "$phases" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --max-examples "${FUZZ_EXAMPLES:-30}" --request-timeout 2 \
    --header "Authorization: Bearer $secret" --no-color | tee "$out"; then
    echo "contract fuzzing FAILED; the gateway's log:" >&2
    tail -n 50 "$work/gateway.log" >&2
    exit 1
  fi
  # A warning that the document lets through what the gateway refuses is
  # a failure of the document, for every operation but one. A batch names
  # each key once, and each lock's permits fit its limit: JSON Schema can
  # say neither (the document's descriptions say both, and
  # tests/api/batch.rs's bad_batches_are_refused_and_hold_nothing checks
  # both refusals), so a seed that draws many batches breaking them warns
  # about POST /locks/batch, and only that warning is let pass.
  mismatched="$(awk '
    /Schema validation mismatch:/ { listing = 1; next }
    listing && /^  - / { print substr($0, 5); next }
    listing && NF > 0 { listing = 0 }' "$out" | grep -vx 'POST /locks/batch' || true)"
  if [ -n "$mismatched" ]; then
    echo "contract fuzzing FAILED: the document lets through requests the gateway refuses:" >&2
    echo "$mismatched" >&2
    exit 1
  fi
done
