#!/usr/bin/env bash
# Tests lockgate's Debian package on this machine (as root; it installs and
# purges the package lockgate, so it refuses to run where that package is
# already installed):
#   scripts/test-package.sh [DEB]      DEB, or the one build-package.sh makes
# lintian must report no error (its warnings are printed); then dpkg -i,
# the files in place, dpkg -i again (an upgrade keeps the admin token),
# dpkg -r (the conffile and token stay), dpkg -P (both go), each exit 0.
# The maintainer scripts must succeed where systemd is not running.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
started=$SECONDS

say() { printf 'test-package: %s\n' "$*"; }
fail() { say "FAIL: $*" >&2; exit 1; }

[[ "$(id -u)" -eq 0 ]] || fail "needs root (dpkg -i)"
if dpkg-query -W -f='${Status}' lockgate 2>/dev/null | grep -q 'installed'; then
  fail "the package lockgate is already installed here: remove it first (dpkg -P lockgate)"
fi
command -v lintian >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null; }

deb="${1:-$("$root/scripts/build-package.sh")}"
[[ -f "$deb" ]] || fail "no package at $deb"
version="$(dpkg-deb --field "$deb" Version)"
say "package $deb (version $version)"

# A failed run leaves nothing installed.
trap 'dpkg -P lockgate >/dev/null 2>&1 || true' EXIT

lintian_out="$(lintian --tag-display-limit 0 "$deb" 2>&1 | grep -v 'running with root privileges')" || true
printf '%s\n' "$lintian_out" | sed '/^$/d;s/^/  lintian: /'
if grep -q '^E: ' <<<"$lintian_out"; then fail "lintian reports errors"; fi
say "lintian: $(grep -c '^E: ' <<<"$lintian_out" || true) errors, $(grep -c '^W: ' <<<"$lintian_out" || true) warnings"

token=/etc/lockgate/admin-token
conffile=/etc/default/lockgate
settings=/etc/lockgate/lockgate.toml
unit=/usr/lib/systemd/system/lockgate.service

dpkg -i "$deb" >/dev/null || fail "dpkg -i exited $?"
[[ "$(/usr/bin/lockgate --version | head -1)" == "lockgate ${version%%-*}" ]] \
  || fail "/usr/bin/lockgate --version says $(/usr/bin/lockgate --version | head -1)"
for page in lockgate lockgate-serve lockgate-health lockgate-run; do
  zcat "/usr/share/man/man1/$page.1.gz" | grep -q '^\.TH' || fail "no man page $page(1)"
done
for completion in /usr/share/bash-completion/completions/lockgate \
  /usr/share/zsh/vendor-completions/_lockgate /usr/share/fish/vendor_completions.d/lockgate.fish; do
  grep -q serve "$completion" || fail "no completion $completion"
done
cmp -s "$unit" "$root/packaging/lockgate.service" || fail "$unit is not packaging/lockgate.service"
dpkg-query -W -f='${Conffiles}\n' lockgate | grep -q "^ $conffile " || fail "$conffile is not a conffile"
dpkg-query -W -f='${Conffiles}\n' lockgate | grep -q "^ $settings " || fail "$settings is not a conffile"
# Every setting is in it, commented; as installed it sets none, and checks.
/usr/bin/lockgate config check "$settings" >/dev/null || fail "lockgate config check $settings failed"
grep -q '^#redis_url = "redis://127.0.0.1:6379"$' "$settings" || fail "$settings does not name redis_url's default"
[[ -f /usr/share/doc/lockgate/copyright && -f /usr/share/doc/lockgate/changelog.gz ]] || fail "no copyright or changelog"
# The alert rules pass their own tests where they are installed.
ops=/usr/share/lockgate/ops
cmp -s "$ops/grafana/lockgate.json" "$root/ops/grafana/lockgate.json" || fail "no dashboard at $ops/grafana"
if command -v promtool >/dev/null 2>&1; then
  promtool test rules "$ops/prometheus/lockgate-rules.test.yml" >/dev/null \
    || fail "promtool test rules $ops/prometheus/lockgate-rules.test.yml failed"
else
  cmp -s "$ops/prometheus/lockgate-rules.yml" "$root/ops/prometheus/lockgate-rules.yml" || fail "no rules at $ops/prometheus"
fi
[[ "$(stat -c '%U %a' "$token")" == "root 600" ]] || fail "$token is $(stat -c '%U %a' "$token")"
grep -qE '^[0-9a-f]{64}$' "$token" || fail "$token is not 32 random bytes in hex"
first_token="$(cat "$token")"
say "installed: $(dpkg-query -W -f='${Installed-Size}' lockgate) KiB, $(dpkg -L lockgate | wc -l) paths"

dpkg -i "$deb" >/dev/null || fail "dpkg -i (again, an upgrade) exited $?"
[[ "$(cat "$token")" == "$first_token" ]] || fail "an upgrade replaced the admin token"

dpkg -r lockgate >/dev/null || fail "dpkg -r exited $?"
[[ ! -e /usr/bin/lockgate ]] || fail "dpkg -r left /usr/bin/lockgate"
[[ -f "$conffile" && -f "$settings" && -f "$token" ]] || fail "dpkg -r removed a conffile or the token"

dpkg -P lockgate >/dev/null || fail "dpkg -P exited $?"
[[ ! -e "$conffile" && ! -e "$settings" && ! -e "$token" && ! -e /etc/lockgate ]] || fail "dpkg -P left $conffile, $settings or $token"
[[ ! -e /etc/systemd/system/lockgate.service ]] || fail "dpkg -P left a mask of lockgate.service"
trap - EXIT
say "ok: lintian, dpkg -i, upgrade, dpkg -r, dpkg -P in $((SECONDS - started)) s"
