#!/usr/bin/env bash
# Tests lockgate's container image from its own root (as root): podman run
# needs more of the kernel than this machine's sandbox grants, so the test
# mounts the image (podman image mount) and runs its binary under chroot,
# as the image's user 65532:
#   scripts/test-image.sh [IMAGE]     IMAGE, or the one build-image.sh makes
# --version; `serve` against a Redis named by host name (localhost, found
# through the image's nsswitch.conf and /etc/hosts); `health` exits 0 while
# it serves and 1 once it is gone. Prints the image's size.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/lib.sh"
started=$SECONDS

say() { printf 'test-image: %s\n' "$*"; }
fail() { say "FAIL: $*" >&2; [[ -f "${work:-}/gateway.log" ]] && tail -20 "$work/gateway.log" >&2; exit 1; }

[[ "$(id -u)" -eq 0 ]] || fail "needs root (podman image mount, chroot)"
image="${1:-$("$root/scripts/build-image.sh")}"
podman=podman; command -v podman >/dev/null 2>&1 || podman=buildah

scratch
mnt="$($podman image mount "$image")"
scratch_extra() { $podman image unmount "$image" >/dev/null 2>&1 || true; }
in_image() { chroot --userspec=65532:65532 "$mnt" /usr/bin/lockgate "$@"; }

[[ -x "$mnt/usr/bin/lockgate" && -f "$mnt/etc/ssl/certs/ca-certificates.crt" ]] \
  || fail "the image lacks the binary or the CA bundle"
config="$(podman image inspect --format '{{.Config.User}} {{json .Config.Healthcheck.Test}}' "$image" 2>/dev/null || true)"
[[ "$config" == '65532:65532 ["CMD","/usr/bin/lockgate","health"]' ]] || fail "image config: $config"
first="$(in_image --version | head -1)" || fail "--version failed in the image"
say "--version in the image: $first"

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind "127.0.0.1 -::1" --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
wait_for redis-cli -p "$redis_port" ping

gateway_port="$(free_port)"
LOCKGATE_REDIS_URL="redis://localhost:$redis_port" LOCKGATE_LISTEN="127.0.0.1:$gateway_port" \
  chroot --userspec=65532:65532 "$mnt" /usr/bin/lockgate serve >"$work/gateway.log" 2>&1 &
gateway=$!
pids+=("$gateway")
url="http://127.0.0.1:$gateway_port/readyz"
wait_for in_image health --url "$url" || fail "health never exited 0 for the gateway in the image"
in_image health --url "$url" || fail "health exited $?"
say "serve (Redis at localhost:$redis_port) and health in the image: exit 0"

kill "$gateway"; wait "$gateway" 2>/dev/null || true
if in_image health --url "$url" --timeout-ms 500 >/dev/null 2>&1; then fail "health exited 0 with no gateway"; fi

size="$(podman image inspect --format '{{.Size}}' "$image")"
say "ok: image $image, $((size / 1024 / 1024)) MiB ($size bytes), in $((SECONDS - started)) s"
