#!/usr/bin/env bash
# Installs the lock services loadtest/anchors/run.sh measures lockgate
# against, each from its own ecosystem's packages, when they are missing:
#   etcd        Debian's etcd-server
#   zookeeper   Debian's zookeeper (the server and its jars; zookeeperd would
#               only add a system service that starts one at boot) with
#               Curator's recipes and Debian's JDK to compile the driver
#   redlock     npm's redlock (with ioredis), locked by
#               loadtest/anchors/redlock/package-lock.json, into .run/anchors/redlock
#   redis-lock  PyPI's python-redis-lock (with redis-py), pinned by
#               loadtest/anchors/requirements.txt, into .run/anchors/venv
#   scripts/ensure-anchors.sh [etcd zookeeper redlock redis-lock]  (default: all)
# A peer that cannot be installed is reported and skipped, not fatal: the
# benchmark says so in its table. Safe to run again: present tools are skipped.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
anchors="$root/loadtest/anchors"
run_dir="$root/.run/anchors"
say() { printf 'ensure-anchors: %s\n' "$*" >&2; }

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
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$apt_updated" = no ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
    apt_updated=yes
  fi
  say "installing $* with apt-get"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Debian's ZooKeeper server, and the jars the Curator driver compiles against.
zookeeper_home=/usr/share/zookeeper
curator_jar=/usr/share/java/curator-recipes.jar

ensure_etcd() {
  command -v etcd >/dev/null 2>&1 && return 0
  apt_install etcd-server && return 0
  say "etcd is missing: install it (Debian/Ubuntu: apt-get install etcd-server)"
  return 1
}

ensure_zookeeper() {
  [ -x "$zookeeper_home/bin/zkServer.sh" ] && [ -f "$curator_jar" ] \
    && command -v javac >/dev/null 2>&1 && return 0
  apt_install zookeeper libcurator-recipes-java default-jdk-headless && return 0
  say "ZooKeeper or Curator is missing: install them (Debian/Ubuntu: apt-get install zookeeper libcurator-recipes-java default-jdk-headless)"
  return 1
}

# node_modules is current when it was installed from this very lock file.
ensure_redlock() {
  "$root/scripts/ensure-tools.sh" node || return 1
  local lock_hash stamp="$run_dir/redlock/node_modules/.installed-from-lock"
  lock_hash="$(sha256sum "$anchors/redlock/package-lock.json" | cut -d' ' -f1)"
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_hash" ] && return 0
  say "installing redlock from npm into $run_dir/redlock"
  mkdir -p "$run_dir/redlock"
  cp "$anchors/redlock/package.json" "$anchors/redlock/package-lock.json" "$run_dir/redlock/"
  (cd "$run_dir/redlock" && npm ci --no-audit --no-fund --silent) || {
    say "npm could not install redlock"
    return 1
  }
  echo "$lock_hash" >"$stamp"
}

ensure_redis_lock() {
  "$root/scripts/ensure-tools.sh" python-venv || return 1
  local venv="$run_dir/venv"
  cmp -s "$anchors/requirements.txt" "$venv/.requirements" 2>/dev/null && return 0
  say "installing $(tr '\n' ' ' <"$anchors/requirements.txt")from PyPI into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" \
    && "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$anchors/requirements.txt" || {
    say "pip could not install $anchors/requirements.txt"
    rm -rf "$venv"
    return 1
  }
  cp "$anchors/requirements.txt" "$venv/.requirements"
}

peers=("$@")
[ "${#peers[@]}" -gt 0 ] || peers=(etcd zookeeper redlock redis-lock)
status=0
for peer in "${peers[@]}"; do
  case "$peer" in
    etcd) ensure_etcd || status=1 ;;
    zookeeper) ensure_zookeeper || status=1 ;;
    redlock) ensure_redlock || status=1 ;;
    redis-lock) ensure_redis_lock || status=1 ;;
    *) say "unknown peer $peer"; exit 2 ;;
  esac
done
exit "$status"
