#!/usr/bin/env bash
# Builds lockgate's Debian package and prints its path:
#   scripts/build-package.sh            the release binary, then the .deb
# The man pages and the bash, zsh and fish completions come from the clap
# definition (examples/generate-docs.rs), the copyright file from LICENSE and
# the Debian changelog from CHANGELOG.md (packaging/debian-docs.py), all into
# packaging/generated/; then `cargo deb --no-build` packs the assets that
# Cargo.toml's [package.metadata.deb] names. cargo-deb is installed from
# crates.io when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
CARGO="${CARGO:-cargo}"

if ! "$CARGO" deb --version >/dev/null 2>&1; then
  echo "build-package: installing cargo-deb from crates.io" >&2
  "$CARGO" install --locked cargo-deb >&2
fi

target_dir="$("$CARGO" metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"

# The example first, the binary last: an example also unifies the
# dev-dependencies' features into the library, so the two are built apart
# and the package holds the binary `cargo build --release` makes (as
# scripts/build-image.sh does), not a build with test features. The
# example is a debug build: it shares the library the tests built, and
# only prints text.
"$CARGO" build --locked --example generate-docs >&2
rm -rf packaging/generated
"$target_dir/debug/examples/generate-docs" packaging/generated
python3 packaging/debian-docs.py packaging/generated
"$CARGO" build --release --locked --bin lockgate >&2

"$CARGO" deb --no-build --locked --output "$target_dir/debian" >&2
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
arch="$(dpkg --print-architecture)"
deb="$target_dir/debian/lockgate_${version}_${arch}.deb"
[[ -f "$deb" ]] || deb="$(ls -t "$target_dir"/debian/lockgate_"${version}"*.deb | head -1)"
echo "$deb"
