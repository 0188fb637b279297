#!/usr/bin/env bash
# Builds lockgate's container image (packaging/Containerfile) with podman, or
# buildah where podman is missing, and prints its name:
#   scripts/build-image.sh [NAME]        default lockgate:<version>
# The image's root is made here from this machine's files: the release
# binary (stripped), the loader and libraries ldd names for it, the NSS
# modules for /etc/hosts and DNS, and the CA bundle. Debian's podman is
# installed when neither tool is present.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
CARGO="${CARGO:-cargo}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
name="${1:-lockgate:$version}"

if ! command -v podman >/dev/null 2>&1 && ! command -v buildah >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman >/dev/null
fi
[[ -f /etc/ssl/certs/ca-certificates.crt ]] \
  || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null

"$CARGO" build --release --locked --bin lockgate >&2
target_dir="$("$CARGO" metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
binary="$target_dir/release/lockgate"

image_root="$target_dir/image-root"
rm -rf "$image_root"
mkdir -p "$image_root"/{usr/bin,etc/ssl/certs,tmp}
chmod 1777 "$image_root/tmp"
strip --strip-all -o "$image_root/usr/bin/lockgate" "$binary"

# Each library at the path the loader looks in, as the real file.
multiarch="$(dirname "$(ldd "$binary" | awk '$1 ~ /^libc\.so/ {print $3}')")"
libraries=("$multiarch"/libnss_files.so.2 "$multiarch"/libnss_dns.so.2)
while read -r path; do libraries+=("$path"); done \
  < <(ldd "$binary" | grep -oE '/[^ ]+\.so[^ ]*' | sort -u)
for library in "${libraries[@]}"; do
  [[ -e "$library" ]] || continue
  mkdir -p "$image_root$(dirname "$library")"
  cp -L "$library" "$image_root$library"
done

cp -L /etc/ssl/certs/ca-certificates.crt "$image_root/etc/ssl/certs/"
printf '%s\n' 'root:x:0:0:root:/:/nonexistent' 'lockgate:x:65532:65532:lockgate:/:/nonexistent' \
  > "$image_root/etc/passwd"
printf '%s\n' 'root:x:0:' 'lockgate:x:65532:' > "$image_root/etc/group"
printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' > "$image_root/etc/nsswitch.conf"
# A runtime mounts its own /etc/hosts over this one; a chroot sees this.
printf '%s\n' '127.0.0.1 localhost' '::1 localhost ip6-localhost ip6-loopback' > "$image_root/etc/hosts"

if command -v podman >/dev/null 2>&1; then
  # The docker format: the OCI one has no HEALTHCHECK.
  podman build --quiet --format docker --file packaging/Containerfile --tag "$name" "$image_root" >&2
else
  buildah bud --quiet --format docker --file packaging/Containerfile --tag "$name" "$image_root" >&2
fi
echo "$name"
