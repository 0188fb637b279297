#!/usr/bin/env bash
# The anchors benchmark: lockgate beside the lock services people pick
# instead, each installed from its own packages and run as one node on this
# machine, in one run, with one table of the figures.
#
#   loadtest/anchors/run.sh        (or: make anchors)
#
# Peers: etcd's lock API (Debian's etcd-server, through its HTTP/JSON
# gateway), ZooKeeper with Curator's InterProcessMutex (Debian's zookeeper
# and libcurator-recipes-java), and the Redis lock libraries applications
# embed, on the same Redis as lockgate: redlock (npm) and python-redis-lock
# (PyPI). scripts/ensure-anchors.sh installs them; a peer that cannot be
# installed or run is named in the table with the reason, never given a figure.
#
# Every system runs twice: durable (etcd and ZooKeeper with their default
# fsync on a disk directory, Redis with appendfsync always) and in memory
# (their data on tmpfs, ZooKeeper with forceSync=no, Redis without
# persistence). Phases, each ANCHORS_SECONDS long (default 5):
#   cycles   ANCHORS_CLIENTS clients (default 50), a key each, lock + unlock
#   relay    the same clients on one key, each unlocking as soon as it is
#            granted and asking again: hand-offs to another client per
#            second, and the time from each release to the next grant
#   relay-20 lockgate alone: the relay with ANCHORS_RELAY_CLIENTS (default
#            20) clients, for the Redis work per contended cycle
#   waiters  ANCHORS_WAITERS (default 10 000) clients waiting on one held
#            key, for the systems that wait in the server (lockgate, etcd,
#            python-redis-lock's BLPOP in Redis); etcd queues them more
#            slowly the more wait, so it gets ANCHORS_QUEUE_SECONDS (default
#            30) to queue them, and the table says how many it did
# lockgate and etcd are driven by lockbench (HTTP, the same load generator);
# the others by a small driver in the peer's own client language
# (CuratorBench.java, redlock/bench.mjs, redis_lock_bench.py). Every driver
# reports its own CPU; the servers' CPU is utime + stime of every server
# process of the system (/proc/PID/stat) over the phase, their memory the
# highest total RSS during the waiters phase above the total before it. For
# the systems on Redis, the relay phases also count Redis's work: script
# calls and commands (INFO commandstats, reset before the phase) and, durable,
# its fsyncs (strace -c of fdatasync and fsync on redis-server, stopping only
# on those calls).
#
# LOCKGATE_BIN and LOCKBENCH_BIN may name prebuilt binaries; otherwise they
# are built here (cargo build --release). ANCHORS_DISK_DIR and
# ANCHORS_TMPFS_DIR choose where the durable and the in-memory data go
# (defaults: .run/anchors/data and /dev/shm). Writes the JSON of every
# figure, with the versions, to .run/anchors/anchors.json (ANCHORS_OUT);
# each figure is also kept as it is measured, in .run/anchors/results-*.jsonl.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
anchors="$root/loadtest/anchors"
run_dir="$root/.run/anchors"
seconds="${ANCHORS_SECONDS:-5}"
clients="${ANCHORS_CLIENTS:-50}"
relay_clients="${ANCHORS_RELAY_CLIENTS:-20}"
waiters="${ANCHORS_WAITERS:-10000}"
queue_seconds="${ANCHORS_QUEUE_SECONDS:-30}"
# A driver that hangs is stopped and its cells say it failed.
driver_limit=$((seconds + queue_seconds + 120))
out="${ANCHORS_OUT:-$run_dir/anchors.json}"
mkdir -p "$run_dir"
disk_dir="${ANCHORS_DISK_DIR:-$run_dir/data}"
mkdir -p "$disk_dir"
disk="$(mktemp -d "$disk_dir/run.XXXXXX")"
memory="$(mktemp -d "${ANCHORS_TMPFS_DIR:-/dev/shm}/lockgate-anchors.XXXXXX")"
work="$(mktemp -d)"
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work" "$disk" "$memory"
  if [ "$status" -ne 0 ] && [ -s "${results:-}" ]; then
    printf 'anchors: stopped (status %s); the figures measured so far: %s\n' "$status" "$results" >&2
  fi
}
trap cleanup EXIT

# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"
say() { printf 'anchors: %s\n' "$*" >&2; }

# 10 000 waiting clients need as many sockets in the server and in the
# load generator.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((waiters + 200)) ]; then
  say "open file limit $(ulimit -n) is below $waiters waiters: fewer will wait"
fi

"$root/scripts/ensure-tools.sh" rust redis curl
"$root/scripts/ensure-anchors.sh" || say "a peer could not be installed: the table says which"

# BASELINE_BIN: the build before (a release build), measured beside this
# one in the same run as lockgate-before.
baseline="${BASELINE_BIN:-}"
lockgate="${LOCKGATE_BIN:-}"
lockbench="${LOCKBENCH_BIN:-}"
if [ -z "$lockgate" ] || [ -z "$lockbench" ]; then
  say "building (release)..."
  (cd "$root" && cargo build --release --locked --quiet --bin lockgate --example lockbench)
  target="${CARGO_TARGET_DIR:-$root/target}"
  lockgate="${lockgate:-$target/release/lockgate}"
  lockbench="${lockbench:-$target/release/examples/lockbench}"
fi

# The drivers in the peers' own languages, where their tools are.
curator_classpath="/usr/share/java/curator-recipes.jar:$run_dir/java"
if [ -f /usr/share/java/curator-recipes.jar ] && command -v javac >/dev/null 2>&1 \
  && [ ! "$run_dir/java/CuratorBench.class" -nt "$anchors/CuratorBench.java" ]; then
  mkdir -p "$run_dir/java"
  javac -d "$run_dir/java" -cp /usr/share/java/curator-recipes.jar "$anchors/CuratorBench.java"
fi
[ -d "$run_dir/redlock/node_modules" ] && cp "$anchors/redlock/bench.mjs" "$run_dir/redlock/"

# Everything shares the machine's cores: the table says how busy it was.
load_before="$(cut -d' ' -f1 /proc/loadavg)"
# Every figure is written here as soon as it is measured, outside the
# scratch directory: a run that stops half way keeps what it measured.
results="$run_dir/results-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
: >"$results"
# The servers' logs and the drivers' own output, kept after the run.
logs="$run_dir/logs"
mkdir -p "$logs"
drivers_log="$logs/drivers.log"
: >"$drivers_log"

rss_kib() { awk '/VmRSS/ {print $2; exit}' "/proc/$1/status" 2>/dev/null || true; }
cpu_total() {
  local total=0 pid
  for pid in "$@"; do total=$((total + $(cpu_ms "$pid"))); done
  echo "$total"
}
rss_total() {
  local total=0 pid kib
  for pid in "$@"; do kib="$(rss_kib "$pid")"; total=$((total + ${kib:-0})); done
  echo "$total"
}
# sample_rss FILE PID...: writes the highest total RSS (KiB) of the
# processes to FILE, every 0.1 s, until killed.
sample_rss() {
  local file="$1" peak=0 total
  shift
  while :; do
    total="$(rss_total "$@")"
    if [ "$total" -gt "$peak" ]; then peak="$total"; echo "$peak" >"$file"; fi
    sleep 0.1
  done
}

# record SYSTEM COLUMN PHASE JSON-FIELDS: one line of results.
record() {
  python3 -c 'import json, sys; print(json.dumps({"system": sys.argv[1], "column": sys.argv[2], "phase": sys.argv[3], **json.loads(sys.argv[4])}))' \
    "$1" "$2" "$3" "$4" >>"$results"
}
# missing SYSTEM WHY PHASE...: the system has no figure for these phases.
missing() {
  local system="$1" why="$2" column phase
  shift 2
  for column in durable memory; do
    for phase in "$@"; do
      record "$system" "$column" "$phase" "$(python3 -c 'import json, sys; print(json.dumps({"missing": sys.argv[1]}))' "$why")"
    done
  done
}

# measure SYSTEM COLUMN PHASE PID... -- DRIVER...: runs the driver (which
# prints one JSON line) and records it with the servers' CPU over the run.
measure() {
  local system="$1" column="$2" phase="$3" servers=() before after driven
  shift 3
  while [ "$1" != -- ]; do servers+=("$1"); shift; done
  shift
  say "$system, $column: $phase"
  echo "== $system $column $phase: $*" >>"$drivers_log"
  before="$(cpu_total "${servers[@]}")"
  local pid each_before=() each=""
  for pid in "${servers[@]}"; do each_before+=("$(cpu_ms "$pid")"); done
  if driven="$(timeout "$driver_limit" "$@" 2>>"$drivers_log" | tail -n 1)" && [ -n "$driven" ]; then
    after="$(cpu_total "${servers[@]}")"
    # Each server process's own share, in the order given (lockgate: the
    # gateway, then Redis).
    local i
    for i in "${!servers[@]}"; do
      each+="${each:+, }$(( $(cpu_ms "${servers[$i]}") - each_before[i] ))"
    done
    record "$system" "$column" "$phase" "{\"driver\": $driven, \"server_cpu_ms\": $((after - before)), \"server_cpu_ms_each\": [$each]}"
  else
    record "$system" "$column" "$phase" '{"missing": "the driver failed (see .run/anchors/logs/drivers.log)"}'
  fi
}

# count_redis_start COLUMN: Redis's command counts reset, and (durable) its
# fsyncs counted from now, until count_redis_stop.
count_redis_start() {
  redis-cli -p "$redis_port" config resetstat >/dev/null
  strace_pid=""
  if [ "$1" = durable ] && command -v strace >/dev/null 2>&1; then
    strace --seccomp-bpf -f -c -e trace=fdatasync,fsync -o "$work/strace" -p "$redis_pid" 2>>"$drivers_log" &
    strace_pid=$!
    # Attached to every thread before the phase starts.
    sleep 0.5
  fi
}

# count_redis_stop SYSTEM COLUMN PHASE: records what Redis did since
# count_redis_start, as PHASE-redis: script calls, commands (less this
# reading's INFO) and fsyncs (null in memory, or without strace).
count_redis_stop() {
  local fsyncs=null
  if [ -n "$strace_pid" ]; then
    kill -INT "$strace_pid" 2>/dev/null || true
    wait "$strace_pid" 2>/dev/null || true
    fsyncs="$(awk '$NF == "fdatasync" || $NF == "fsync" {n += $4} END {print n + 0}' "$work/strace")"
  fi
  redis-cli -p "$redis_port" info commandstats | tr -d '\r' >"$work/commandstats"
  local counts
  counts="$(python3 -c '
import json, re, sys
calls = {m.group(1): int(m.group(2)) for m in re.finditer(r"cmdstat_([^:]+):calls=(\d+)", open(sys.argv[1]).read())}
scripts = sum(calls.get(c, 0) for c in ("fcall", "evalsha", "eval", "fcall_ro", "evalsha_ro"))
commands = sum(n for c, n in calls.items() if c not in ("info", "config|resetstat"))
print(json.dumps({"script_calls": scripts, "commands": commands, "calls": calls}))' "$work/commandstats")"
  record "$1" "$2" "$3-redis" "{\"redis\": $counts, \"fsyncs\": $fsyncs}"
}

# measure_waiters SYSTEM COLUMN PID... -- DRIVER...: the servers' highest
# total RSS while the driver keeps its clients waiting, above the total before.
measure_waiters() {
  local system="$1" column="$2" servers=() idle sampler driven
  shift 2
  while [ "$1" != -- ]; do servers+=("$1"); shift; done
  shift
  say "$system, $column: $waiters waiters"
  echo "== $system $column waiters: $*" >>"$drivers_log"
  idle="$(rss_total "${servers[@]}")"
  echo "$idle" >"$work/peak"
  sample_rss "$work/peak" "${servers[@]}" &
  sampler=$!
  if driven="$(timeout "$driver_limit" "$@" 2>>"$drivers_log" | tail -n 1)" && [ -n "$driven" ]; then
    kill "$sampler"; wait "$sampler" 2>/dev/null || true
    record "$system" "$column" waiters \
      "{\"driver\": $driven, \"rss_idle_kib\": $idle, \"rss_peak_kib\": $(cat "$work/peak")}"
  else
    kill "$sampler"; wait "$sampler" 2>/dev/null || true
    record "$system" "$column" waiters '{"missing": "the driver failed (see .run/anchors/logs/drivers.log)"}'
  fi
}

# Data directory of a column: on disk (durable) or on tmpfs (in memory).
data_dir() {
  local dir
  if [ "$1" = durable ]; then dir="$disk/$2"; else dir="$memory/$2"; fi
  mkdir -p "$dir"
  echo "$dir"
}

# start_redis COLUMN: sets redis_port and redis_pid.
start_redis() {
  local persistence=(--appendonly no)
  [ "$1" = durable ] && persistence=(--appendonly yes --appendfsync always)
  redis_port="$(free_port)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" "${persistence[@]}" \
    --maxclients $((waiters + 1000)) --dir "$(data_dir "$1" redis)" --logfile "$logs/redis-$1.log" &
  redis_pid=$!
  pids+=("$redis_pid")
  wait_for redis-cli -p "$redis_port" ping
}
stop() { kill "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }

# run_lockgate COLUMN [SYSTEM BINARY]: lockgate's phases (SYSTEM
# lockgate-before with BASELINE_BIN: the build before, on the same Redis).
run_lockgate() {
  local column="$1" system="${2:-lockgate}" binary="${3:-$lockgate}" port gateway_pid url
  port="$(free_port)"
  redis-cli -p "$redis_port" flushall >/dev/null
  "$binary" serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$redis_port" \
    >"$logs/$system-$column.log" 2>&1 &
  gateway_pid=$!
  pids+=("$gateway_pid")
  url="http://127.0.0.1:$port"
  wait_for curl -sf "$url/readyz"
  measure "$system" "$column" cycles "$gateway_pid" "$redis_pid" -- \
    "$lockbench" cycles --url "$url" --clients "$clients" --seconds "$seconds"
  count_redis_start "$column"
  measure "$system" "$column" relay "$gateway_pid" "$redis_pid" -- \
    "$lockbench" relay --url "$url" --clients "$clients" --seconds "$seconds"
  count_redis_stop "$system" "$column" relay
  count_redis_start "$column"
  measure "$system" "$column" relay-20 "$gateway_pid" "$redis_pid" -- \
    "$lockbench" relay --url "$url" --clients "$relay_clients" --seconds "$seconds"
  count_redis_stop "$system" "$column" relay-20
  measure_waiters "$system" "$column" "$gateway_pid" "$redis_pid" -- \
    "$lockbench" waiters --url "$url" --clients "$waiters" --pid "$gateway_pid"
  stop "$gateway_pid"
}

run_redlock() {
  local column="$1"
  if [ ! -f "$run_dir/redlock/bench.mjs" ]; then
    missing_column redlock "$column" "not installed (npm ci of loadtest/anchors/redlock failed)" cycles relay
    return
  fi
  redis-cli -p "$redis_port" flushall >/dev/null
  local phase
  for phase in cycles relay; do
    measure redlock "$column" "$phase" "$redis_pid" -- \
      node "$run_dir/redlock/bench.mjs" "$phase" --redis "redis://127.0.0.1:$redis_port" \
      --clients "$clients" --seconds "$seconds"
  done
}

run_redis_lock() {
  local column="$1"
  if [ ! -x "$run_dir/venv/bin/python" ]; then
    missing_column redis-lock "$column" "not installed (pip install of loadtest/anchors/requirements.txt failed)" cycles relay waiters
    return
  fi
  redis-cli -p "$redis_port" flushall >/dev/null
  local phase
  measure redis-lock "$column" cycles "$redis_pid" -- \
    "$run_dir/venv/bin/python" "$anchors/redis_lock_bench.py" cycles \
    --redis "redis://127.0.0.1:$redis_port" --clients "$clients" --seconds "$seconds"
  count_redis_start "$column"
  measure redis-lock "$column" relay "$redis_pid" -- \
    "$run_dir/venv/bin/python" "$anchors/redis_lock_bench.py" relay \
    --redis "redis://127.0.0.1:$redis_port" --clients "$clients" --seconds "$seconds"
  count_redis_stop redis-lock "$column" relay
  measure_waiters redis-lock "$column" "$redis_pid" -- \
    "$run_dir/venv/bin/python" "$anchors/redis_lock_bench.py" waiters \
    --redis "redis://127.0.0.1:$redis_port" --clients "$waiters"
}

run_etcd() {
  local column="$1" port peer etcd_pid url
  port="$(free_port)"
  peer="$(free_port)"
  etcd --name anchors --data-dir "$(data_dir "$column" etcd)" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "anchors=http://127.0.0.1:$peer" >"$logs/etcd-$column.log" 2>&1 &
  etcd_pid=$!
  pids+=("$etcd_pid")
  url="http://127.0.0.1:$port"
  if ! wait_for curl -sf "$url/health"; then
    missing_column etcd "$column" "did not start (see .run/anchors/logs/etcd-$column.log)" cycles relay waiters
    stop "$etcd_pid"
    return
  fi
  measure etcd "$column" cycles "$etcd_pid" -- \
    "$lockbench" etcd --url "$url" --clients "$clients" --seconds "$seconds"
  measure etcd "$column" relay "$etcd_pid" -- \
    "$lockbench" etcd-relay --url "$url" --clients "$clients" --seconds "$seconds"
  measure_waiters etcd "$column" "$etcd_pid" -- \
    "$lockbench" etcd-waiters --url "$url" --clients "$waiters" --queue-seconds "$queue_seconds"
  stop "$etcd_pid"
}

zookeeper_ok() {
  python3 -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)
s.sendall(b"ruok")
sys.exit(0 if s.recv(4) == b"imok" else 1)' "$1"
}

# The server as Debian's service starts it (QuorumPeerMain, Debian's JVM
# defaults), standalone, on a free port; no admin web server (it would take
# port 8080).
run_zookeeper() {
  local column="$1" port zookeeper_pid dir
  port="$(free_port)"
  dir="$(data_dir "$column" zookeeper)"
  {
    echo "tickTime=2000"
    echo "dataDir=$dir"
    echo "clientPortAddress=127.0.0.1"
    echo "clientPort=$port"
    echo "maxClientCnxns=0"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr"
    if [ "$column" = memory ]; then echo "forceSync=no"; fi
  } >"$work/zoo-$column.cfg"
  java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo-$column.cfg" \
    >"$logs/zookeeper-$column.log" 2>&1 &
  zookeeper_pid=$!
  pids+=("$zookeeper_pid")
  if ! wait_for zookeeper_ok "$port"; then
    missing_column zookeeper "$column" "did not start (see .run/anchors/logs/zookeeper-$column.log)" cycles relay
    stop "$zookeeper_pid"
    return
  fi
  # Never fails the run: an answer it cannot read gives "?".
  [ -n "${zookeeper_version:-}" ] || zookeeper_version="$(python3 "$anchors/probe.py" zookeeper-version "$port" || echo "?")"
  local phase
  for phase in cycles relay; do
    measure zookeeper "$column" "$phase" "$zookeeper_pid" -- \
      java -cp "$curator_classpath" CuratorBench "$phase" --connect "127.0.0.1:$port" \
      --clients "$clients" --seconds "$seconds"
  done
  stop "$zookeeper_pid"
}

missing_column() {
  local system="$1" column="$2" why="$3" phase
  shift 3
  for phase in "$@"; do
    record "$system" "$column" "$phase" "$(python3 -c 'import json, sys; print(json.dumps({"missing": sys.argv[1]}))' "$why")"
  done
}

have_etcd=yes have_zookeeper=yes
command -v etcd >/dev/null 2>&1 || have_etcd=no
{ [ -f "$run_dir/java/CuratorBench.class" ] && [ -f /usr/share/java/zookeeper.jar ]; } || have_zookeeper=no
[ "$have_etcd" = yes ] || missing etcd "not installed (Debian: apt-get install etcd-server)" cycles relay waiters
[ "$have_zookeeper" = yes ] || missing zookeeper "not installed (Debian: apt-get install zookeeper libcurator-recipes-java default-jdk-headless)" cycles relay
for column in durable memory; do
  start_redis "$column"
  run_lockgate "$column"
  [ -z "$baseline" ] || run_lockgate "$column" lockgate-before "$baseline"
  run_redlock "$column"
  run_redis_lock "$column"
  stop "$redis_pid"
  [ "$have_etcd" = no ] || run_etcd "$column"
  [ "$have_zookeeper" = no ] || run_zookeeper "$column"
done
# Where a system waits in its clients, not in the server, there is no
# server memory per waiter to measure.
missing_column zookeeper durable "in the client (each waiter watches the znode before its own)" waiters
missing_column zookeeper memory "in the client (each waiter watches the znode before its own)" waiters
missing_column redlock durable "in the client (retries every 200 ms)" waiters
missing_column redlock memory "in the client (retries every 200 ms)" waiters

# Versions of everything measured, and how each was driven.
package_version() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo "?"; }
node_version_of() {
  [ -f "$run_dir/redlock/node_modules/$1/package.json" ] \
    && node -p "require('$run_dir/redlock/node_modules/$1/package.json').version" || echo "?"
}
python_version_of() {
  [ -x "$run_dir/venv/bin/python" ] \
    && "$run_dir/venv/bin/python" -c 'import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))' "$1" || echo "?"
}
redis_version="$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
if [ -n "${LOCKGATE_BIN:-}" ]; then
  lockgate_build="LOCKGATE_BIN"
else
  lockgate_build="built from $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "?")"
fi
java_version="$(java -version 2>&1 | head -n 1 | sed 's/.*"\(.*\)".*/\1/')"
python3 - "$work/versions.json" <<PY
import json, sys
versions = {
    "lockgate": {"servers": "gateway + Redis", "driver": "lockbench (Rust, HTTP/1.1)",
                 "version": "$("$lockgate" --version | head -n 1) ($lockgate_build), Redis $redis_version"},
    "lockgate-before": {"servers": "gateway + Redis", "driver": "lockbench (Rust, HTTP/1.1)",
                        "version": "$([ -z "$baseline" ] || "$baseline" --version | head -n 1) (BASELINE_BIN), Redis $redis_version"},
    "etcd": {"servers": "etcd", "driver": "lockbench (Rust, HTTP/1.1 to the JSON gateway)",
             "version": "etcd $(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') (Debian $(package_version etcd-server))"},
    "zookeeper": {"servers": "ZooKeeper (JVM)", "driver": "CuratorBench (Java, a session per client)",
                  "version": "ZooKeeper ${zookeeper_version:-?} (Debian $(package_version zookeeper)), Curator $(package_version libcurator-recipes-java), JDK $java_version"},
    "redlock": {"servers": "Redis", "driver": "redlock/bench.mjs (Node $(node --version 2>/dev/null), a connection per client)",
                "version": "redlock $(node_version_of redlock), ioredis $(node_version_of ioredis), Redis $redis_version"},
    "redis-lock": {"servers": "Redis", "driver": "redis_lock_bench.py (Python threads, a connection per client)",
                   "version": "python-redis-lock $(python_version_of python-redis-lock), redis-py $(python_version_of redis), Redis $redis_version"},
}
json.dump(versions, open(sys.argv[1], "w"))
PY
python3 - "$work/settings.json" <<PY
import json, sys
json.dump({"seconds": $seconds, "clients": $clients, "relay_clients": $relay_clients, "waiters": $waiters,
           "queue_seconds": $queue_seconds, "cores": $(nproc),
           "load_before": "$load_before", "load_after": "$(cut -d' ' -f1 /proc/loadavg)",
           "date": "$(date -u +%Y-%m-%d)", "disk_fs": "$(stat -f -c %T "$disk")",
           "memory_fs": "$(stat -f -c %T "$memory")"}, open(sys.argv[1], "w"))
PY

echo
python3 "$anchors/report.py" "$results" "$work/versions.json" "$work/settings.json" "$out"
echo
echo "every figure, with the versions: $out"
