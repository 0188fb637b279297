#!/usr/bin/env bash
# What a plain uncontended lock cycle costs Redis, beside a floor that runs
# only what a fenced re-entrant lock needs, in one run on one Redis.
#
#   loadtest/bench-redis-cost.sh        (make bench runs it)
#
# Three loads in turn, BENCH_ROUNDS times (default 3), each BENCH_SECONDS
# long (default 10), 50 clients on distinct keys:
#   gateway    lockbench cycles through the gateway (POST /locks, DELETE)
#   functions  the gateway's own acquire and release functions by FCALL,
#              straight on Redis (lockbench script-cycles --library)
#   floor      a floor library (lockbench script-cycles): holder hash, fence
#              counter, compare-and-delete, publish; nothing else
#   and the floor's steps towards the gateway's functions (wide: their
#   eight keys and arguments; busy: and the EXISTS of lib/base.lua's busy;
#   same: and their very commands), each step's cost the difference
# For each: Redis's CPU per cycle (utime + stime from /proc) and the
# commands it ran per cycle (INFO commandstats, each command by name). The
# ratio functions / floor is the lock scripts' own overhead; gateway /
# floor adds what the gateway sends besides the two scripts.
# Then, where valgrind is installed, the same loads once more against a
# Redis under callgrind: the instructions Redis runs per cycle (its own code,
# not the kernel's), which repeat whatever else the machine is doing, where
# its CPU time does not (BENCH_CALLGRIND=0 skips it).
# LOCKGATE_BIN and LOCKBENCH_BIN may name prebuilt binaries.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${BENCH_SECONDS:-10}"
rounds="${BENCH_ROUNDS:-3}"

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
scratch
say() { printf 'bench-redis-cost: %s\n' "$*" >&2; }

"$root/scripts/ensure-tools.sh" rust redis curl
lockgate="${LOCKGATE_BIN:-}"
lockbench="${LOCKBENCH_BIN:-}"
if [ -z "$lockgate" ] || [ -z "$lockbench" ]; then
  say "building (release)..."
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate --example lockbench)
  target="${CARGO_TARGET_DIR:-$root/target}"
  lockgate="${lockgate:-$target/release/lockgate}"
  lockbench="${lockbench:-$target/release/examples/lockbench}"
fi
load_before="$(cut -d' ' -f1 /proc/loadavg)"

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
pids+=("$redis_pid")
wait_for redis-cli -p "$redis_port" ping
gateway_port="$(free_port)"
"$lockgate" serve --listen "127.0.0.1:$gateway_port" --redis-url "redis://127.0.0.1:$redis_port" \
  >"$work/gateway.log" 2>&1 &
pids+=($!)
gateway="http://127.0.0.1:$gateway_port"
wait_for curl -sf "$gateway/readyz"
library="$(redis-cli -p "$redis_port" --raw FUNCTION LIST LIBRARYNAME 'lockgate_*' | grep -m1 '^lockgate_[0-9a-f]*$')"

# measured LOCKBENCH-ARGS...: the run's JSON with Redis's CPU per cycle and
# each command's calls per cycle (the benchmark's own INFO and CONFIG left out).
measured() {
  local r0 r1 run
  redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null
  r0=$(cpu_ms "$redis_pid")
  run="$("$lockbench" "$@")" || { say "lockbench $1 failed"; exit 1; }
  r1=$(cpu_ms "$redis_pid")
  redis-cli -p "$redis_port" INFO commandstats >"$work/stats"
  python3 - "$run" "$r0" "$r1" "$work/stats" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
if r.get("unexpected", 0):
    sys.exit(f"{r['mode']}: {r['unexpected']} replies were neither a grant nor a release")
done = r["done"]
commands = {}
for line in open(sys.argv[4]):
    if line.startswith("cmdstat_") and not line.startswith(("cmdstat_info:", "cmdstat_config")):
        name, fields = line[len("cmdstat_"):].split(":", 1)
        values = dict(item.split("=") for item in fields.strip().split(","))
        if int(values["failed_calls"]) or int(values["rejected_calls"]):
            sys.exit(f"{r['mode']}: Redis answered errors: {line.strip()}")
        commands[name] = {"per_cycle": round(int(values["calls"]) / done, 3),
                          "usec_per_cycle": round(int(values["usec"]) / done, 2)}
r["redis_cpu_us_per_cycle"] = round((int(sys.argv[3]) - int(sys.argv[2])) * 1000 / done, 2)
r["commands"] = commands
print(json.dumps(r))
PY
}

say "gateway, its functions by FCALL, and the floor in turn: $rounds rounds of ${seconds}s..."
paired=""
for _ in $(seq "$rounds"); do
  through="$(measured cycles --url "$gateway" --clients 50 --seconds "$seconds")"
  functions="$(measured script-cycles --redis "redis://127.0.0.1:$redis_port" --library "$library" --clients 50 --seconds "$seconds")"
  paired+="{\"gateway\": $through, \"functions\": $functions"
  for variant in plain wide busy same; do
    run="$(measured script-cycles --redis "redis://127.0.0.1:$redis_port" --floor-variant "$variant" --clients 50 --seconds "$seconds")"
    [ "$variant" = plain ] && name=floor || name="floor-$variant"
    paired+=", \"$name\": $run"
  done
  paired+="}"$'\n'
done

# The instructions Redis runs per cycle of each load, under callgrind: the
# counters are zeroed before each load and dumped after it.
callgrind_rows=""
if [ "${BENCH_CALLGRIND:-1}" != 0 ] && command -v valgrind >/dev/null 2>&1; then
  say "the same loads against a Redis under callgrind (instructions per cycle)..."
  grind_port="$(free_port)"
  valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p.out" \
    redis-server --port "$grind_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" --logfile "$work/redis-grind.log" 2>"$work/valgrind.log" &
  grind_pid=$!
  pids+=("$grind_pid")
  for _ in $(seq 100); do redis-cli -p "$grind_port" ping >/dev/null 2>&1 && break; sleep 0.3; done
  grind_gateway_port="$(free_port)"
  "$lockgate" serve --listen "127.0.0.1:$grind_gateway_port" --redis-url "redis://127.0.0.1:$grind_port" \
    >"$work/gateway-grind.log" 2>&1 &
  pids+=($!)
  wait_for curl -sf "http://127.0.0.1:$grind_gateway_port/readyz"
  grind_library="$(redis-cli -p "$grind_port" --raw FUNCTION LIST LIBRARYNAME 'lockgate_*' | grep -m1 '^lockgate_[0-9a-f]*$')"
  grind_redis="redis://127.0.0.1:$grind_port"
  # instructions LABEL LOCKBENCH-ARGS...: one load's instructions per cycle.
  instructions() {
    local label="$1" run dump
    shift
    callgrind_control --zero "$grind_pid" >/dev/null
    run="$("$lockbench" "$@")" || { say "lockbench $1 failed"; exit 1; }
    callgrind_control --dump="$label" "$grind_pid" >/dev/null
    dump="$(grep -l "^desc: Trigger: .*$label" "$work"/callgrind.*.out* | tail -n 1)"
    python3 -c 'import json, sys
r = json.loads(sys.argv[1])
totals = [l for l in open(sys.argv[2]) if l.startswith(("summary:", "totals:"))][0]
print(json.dumps({"load": sys.argv[3], "done": r["done"], "instructions_per_cycle": round(int(totals.split()[1]) / r["done"])}))' \
      "$run" "$dump" "$label"
  }
  callgrind_rows+="$(instructions gateway cycles --url "http://127.0.0.1:$grind_gateway_port" --clients 20 --seconds "$seconds")"$'\n'
  callgrind_rows+="$(instructions functions script-cycles --redis "$grind_redis" --library "$grind_library" --clients 20 --seconds "$seconds")"$'\n'
  for variant in plain wide busy same; do
    callgrind_rows+="$(instructions "floor-$variant" script-cycles --redis "$grind_redis" --floor-variant "$variant" --clients 20 --seconds "$seconds")"$'\n'
  done
fi

python3 - "$paired" "$load_before" "$(cut -d' ' -f1 /proc/loadavg)" "$seconds" "$callgrind_rows" <<'PY'
import json, statistics, sys
rounds = [json.loads(l) for l in sys.argv[1].splitlines() if l]
grind = {r["load"]: r for r in (json.loads(l) for l in sys.argv[5].splitlines() if l)}
med = statistics.median
print(f"\nRedis cost of a plain uncontended lock cycle: {sys.argv[4]}s per run, {len(rounds)} rounds, "
      f"load average {sys.argv[2]} before, {sys.argv[3]} after\n")
print("| load | cycles/s | Redis CPU per cycle (µs, /proc) | Redis commands per cycle | in-Redis time per cycle (µs, commandstats) | beside the floor (CPU) |")
print("|---|---|---|---|---|---|")
for name, label in (("floor", "floor: holder hash, fence counter, compare-and-delete, publish (FCALL)"),
                    ("floor-wide", "the floor taking the gateway's 8 keys and 10 + 7 arguments"),
                    ("floor-busy", "and one EXISTS queue watch per script (lib/base.lua busy)"),
                    ("floor-same", "and the gateway's very commands (TIME, GET + SET PX fence, PEXPIREAT, wider HMGETs)"),
                    ("functions", "the gateway's acquire + release functions (FCALL, the same driver)"),
                    ("gateway", "through the gateway (lockbench cycles)")):
    cpu = med([r[name]["redis_cpu_us_per_cycle"] for r in rounds])
    calls = med([sum(c["per_cycle"] for c in r[name]["commands"].values()) for r in rounds])
    usec = med([r[name]["commands"].get("fcall", {}).get("usec_per_cycle", 0) for r in rounds])
    ratio = med([r[name]["redis_cpu_us_per_cycle"] / r["floor"]["redis_cpu_us_per_cycle"] for r in rounds])
    each = ", ".join(f'{r[name]["redis_cpu_us_per_cycle"] / r["floor"]["redis_cpu_us_per_cycle"]:.2f}' for r in rounds)
    print(f'| {label} | {med([r[name]["per_second"] for r in rounds]):,.0f} | {cpu:.1f} | {calls:.2f} | {usec:.1f} | {ratio:.2f}x (rounds {each}) |')
if grind:
    base = grind["floor-plain"]["instructions_per_cycle"]
    print("\nRedis's own instructions per cycle, under callgrind (one run each, 20 clients):\n")
    print("| load | cycles run | instructions per cycle | beside the floor |")
    print("|---|---|---|---|")
    for load in ("floor-plain", "floor-wide", "floor-busy", "floor-same", "functions", "gateway"):
        g = grind[load]
        print(f'| {load} | {g["done"]:,} | {g["instructions_per_cycle"]:,} | {g["instructions_per_cycle"] / base:.2f}x |')
print("\nCommands per cycle (last round), each: calls, µs in Redis")
loads = ("floor", "floor-same", "functions", "gateway")
names = sorted(set().union(*[set(rounds[-1][n]["commands"]) for n in loads]))
print("| command | floor | floor-same | functions | gateway |")
print("|---|---|---|---|---|")
for command in names:
    cells = []
    for n in loads:
        c = rounds[-1][n]["commands"].get(command)
        cells.append(f'{c["per_cycle"]:.2f}, {c["usec_per_cycle"]:.2f}' if c else "–")
    print(f"| {command} | " + " | ".join(cells) + " |")
print("\nraw results:")
for r in rounds:
    print(json.dumps(r))
PY
