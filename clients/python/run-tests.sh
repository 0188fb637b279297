#!/usr/bin/env bash
# Runs the Python client's tests against a real gateway and redis-server.
# The first run makes a virtualenv and installs the client with its test
# dependencies; later runs reuse it and need no network.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="$repo/.run/venv-python-client"
python="${PYTHON:-python3}"

# A virtualenv without pip is what a failed `python3 -m venv` leaves (on
# Debian, when python3-venv is missing): make it again.
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$venv"
    "$python" -m venv "$venv" || {
        rm -rf "$venv"
        echo "cannot make a virtualenv with $python (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
fi

# Install again only when the project's metadata changed (an editable
# install picks up source changes by itself).
stamp="$venv/.lockgate-installed"
want="$(cksum <"$here/pyproject.toml")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$here[test]"
    printf '%s' "$want" >"$stamp"
fi

export LOCKGATE_BIN="${LOCKGATE_BIN:-$repo/target/release/lockgate}"
cd "$here"
exec "$venv/bin/python" -m pytest "$@"
