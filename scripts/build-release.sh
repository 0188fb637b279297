#!/usr/bin/env bash
# An earlier release's gateway, built from the history: prints the path of
# its `lockgate` binary.
#
#   scripts/build-release.sh VERSION        e.g. 0.1.0
#
# The release's commit is read from CHANGELOG.md (the `Commit: <sha>` line
# of its `## [VERSION]` section), else from a tag `vVERSION`, else from
# LOCKGATE_RELEASE_COMMIT; nothing is guessed. That commit's tree is exported
# with `git archive` into target/releases/VERSION/src and built there with
# its own Cargo.lock (--locked); the binary is kept as
# target/releases/VERSION/lockgate beside the commit it came from, and
# rebuilt only when missing or from another commit.
#
# Profile: a debug build without debug info (RELEASE_PROFILE=release for an
# optimised one). The tests need the old scripts and HTTP surface, not its
# speed, and on two cores the debug build is the cheaper by far.
# RELEASE_TARGET_DIR (default target/releases/target) is the cargo target
# directory of every old build: one release's dependencies serve the next.
# Progress goes to stderr; stdout is the path alone.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${1:?usage: $0 VERSION}"
profile="${RELEASE_PROFILE:-debug}"
dir="$root/target/releases/$version"
target_dir="${RELEASE_TARGET_DIR:-$root/target/releases/target}"

say() { printf 'build-release: %s\n' "$*" >&2; }

# The commit of VERSION's section in the changelog, if it has one.
from_changelog() {
  [ -f "$root/CHANGELOG.md" ] || return 0
  awk -v v="$version" '
    /^## \[/ { inside = (index($0, "## [" v "]") == 1) ; next }
    # (No {m,n} intervals: mawk, Debian'\''s awk, has none.)
    inside && match($0, /Commit: *`?[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]+/) {
      s = substr($0, RSTART, RLENGTH); sub(/Commit: *`?/, "", s); print s; exit
    }' "$root/CHANGELOG.md"
}

commit="$(from_changelog)"
source="CHANGELOG.md"
if [ -z "$commit" ] && git -C "$root" rev-parse -q --verify "refs/tags/v$version" >/dev/null; then
  commit="v$version"
  source="tag v$version"
fi
if [ -z "$commit" ] && [ -n "${LOCKGATE_RELEASE_COMMIT:-}" ]; then
  commit="$LOCKGATE_RELEASE_COMMIT"
  source="LOCKGATE_RELEASE_COMMIT"
fi
if [ -z "$commit" ]; then
  say "no commit for $version: CHANGELOG.md has no 'Commit:' line in its [$version] section, there is no tag v$version, and LOCKGATE_RELEASE_COMMIT is unset"
  exit 1
fi
sha="$(git -C "$root" rev-parse --verify -q "$commit^{commit}")" || {
  say "$commit (from $source) is not a commit of this repository"
  exit 1
}

if [ -x "$dir/lockgate" ] && [ "$(cat "$dir/commit" 2>/dev/null)" = "$sha:$profile" ]; then
  echo "$dir/lockgate"
  exit 0
fi

say "building $version from $sha ($source), $profile profile"
started=$SECONDS
rm -rf "$dir/src"
mkdir -p "$dir/src"
git -C "$root" archive --format=tar "$sha" | tar -x -C "$dir/src"
flags=(--locked --bin lockgate)
[ "$profile" = release ] && flags+=(--release)
# No debug info: half the link time, and nobody steps through the old tree.
(cd "$dir/src" && CARGO_TARGET_DIR="$target_dir" CARGO_PROFILE_DEV_DEBUG=0 \
  cargo build --quiet "${flags[@]}")
cp "$target_dir/$profile/lockgate" "$dir/lockgate.new"
mv "$dir/lockgate.new" "$dir/lockgate"
echo "$sha:$profile" >"$dir/commit"
say "built $version in $((SECONDS - started)) s"
echo "$dir/lockgate"
