#!/usr/bin/env bash
# What a plain uncontended lock cycle costs the gateway itself, in
# instructions, beside last round's build: each gateway under callgrind,
# driven by lockbench cycles, with the functions whose instructions per
# cycle differ most between the two.
#
#   loadtest/gateway-cost.sh [seconds of load per gateway, default 15]
#
# LOCKGATE_BIN, LOCKBENCH_BIN and BASELINE_BIN may name prebuilt binaries
# (the baseline: a release build of last round's gateway, as
# loadtest/bench-locks.sh makes it in target/baseline; without it, only this
# build is measured). Instructions are counted only while the load runs
# (callgrind's instrumentation is switched on and off around it), and the
# cycles are counted by Redis (FCALLs of the acquire and release functions),
# so start-up and the machine's other work are not in the figures; the
# gateway runs some 50 times slower under callgrind, which changes how many
# cycles are measured, not what each costs.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-15}"
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
scratch

lockgate="${LOCKGATE_BIN:-$root/target/release/lockgate}"
lockbench="${LOCKBENCH_BIN:-$root/target/release/examples/lockbench}"
baseline="${BASELINE_BIN:-$root/target/baseline/release/lockgate}"
if [ -z "${LOCKGATE_BIN:-}" ] || [ -z "${LOCKBENCH_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate --example lockbench)
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }

# measure NAME BIN: prints "NAME <instructions per cycle>" and leaves the
# per-function instructions in $work/NAME.functions.
measure() {
  local name="$1" bin="$2" redis_port port callgrind calls
  redis_port="$(free_port)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" --logfile "$work/$name.redis.log" &
  pids+=($!)
  port="$(free_port)"
  wait_for redis-cli -p "$redis_port" ping
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/$name.callgrind" \
    "$bin" serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$redis_port" \
    >"$work/$name.log" 2>&1 &
  callgrind=$!
  pids+=("$callgrind")
  # Longer than wait_for's 20 s: a gateway under callgrind starts slowly.
  for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.3; done
  "$lockbench" cycles --url "http://127.0.0.1:$port" --clients 10 --seconds 2 >/dev/null
  redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null
  callgrind_control -i on "$callgrind" >/dev/null 2>&1
  "$lockbench" cycles --url "http://127.0.0.1:$port" --clients 10 --seconds "$seconds" >/dev/null
  callgrind_control -i off "$callgrind" >/dev/null 2>&1
  calls="$(redis-cli -p "$redis_port" INFO commandstats | tr -d '\r' |
    awk -F'[=,]' '/^cmdstat_fcall:/ {print $2}')"
  callgrind_control -d "$callgrind" >/dev/null 2>&1
  kill "$callgrind"
  wait "$callgrind" 2>/dev/null || true
  redis-cli -p "$redis_port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  # The dump made on demand is the one with the load in it.
  callgrind_annotate "$work/$name.callgrind.1" 2>/dev/null >"$work/$name.functions"
  python3 - "$work/$name.functions" "$calls" "$name" <<'PY'
import re, sys
path, calls, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
total = next(int(m.group(1).replace(',', '')) for line in open(path)
             if (m := re.match(r'\s*([\d,]+)\s.*PROGRAM TOTALS', line)))
# Two FCALLs (acquire, release) per cycle.
print(f"{name} {total / (calls / 2):.0f}")
PY
}

echo "this build under callgrind (${seconds}s of load)..." >&2
this="$(measure this "$lockgate")"
last=""
if [ -x "$baseline" ]; then
  echo "last round's build under callgrind (${seconds}s of load)..." >&2
  last="$(measure last "$baseline")"
fi

python3 - "$work" "$this" "$last" <<'PY'
import re, sys
work, this, last = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()

def functions(name, per_cycle):
    """Instructions per cycle by function (the binary's path left out)."""
    found, total = {}, None
    for line in open(f"{work}/{name}.functions"):
        m = re.match(r'\s*([\d,]+)\s+\([^)]*\)\s+(.*)', line)
        if not m:
            continue
        count = int(m.group(1).replace(',', ''))
        label = re.sub(r'\s*\[[^\]]*\]\s*$', '', m.group(2))
        if 'PROGRAM TOTALS' in label:
            total = count
            continue
        found[label] = found.get(label, 0) + count
    cycles = total / per_cycle
    return {label: count / cycles for label, count in found.items()}

print("| build | gateway instructions per lock cycle (callgrind) | beside last round's |")
print("|---|---|---|")
ratio = f"{int(this[1]) / int(last[1]):.2f}" if last else ""
print(f"| this build | {int(this[1]):,} | {ratio} |".replace(',', ' '))
if last:
    print(f"| last round's | {int(last[1]):,} | 1.00 |".replace(',', ' '))
    now, before = functions("this", int(this[1])), functions("last", int(last[1]))
    moved = sorted(set(now) | set(before), key=lambda f: -abs(now.get(f, 0) - before.get(f, 0)))
    print()
    print("Functions whose own instructions per cycle differ most (this build, last round's):")
    for label in moved[:15]:
        a, b = now.get(label, 0), before.get(label, 0)
        print(f"  {a - b:+8.0f}  {a:8.0f} {b:8.0f}  {label[:110]}")
PY
