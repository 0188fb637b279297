#!/usr/bin/env bash
# Builds the Java client with javac and runs its JUnit 5 suite against the
# real gateway binary and a real redis-server, offline: the JDK and Debian's
# junit5 jars are all it needs (no Maven, no download).
#
# Needs javac and java 17 or newer (Debian: openjdk-17-jdk-headless), junit5
# (its console launcher, /usr/share/java/junit-platform-console-standalone.jar),
# redis-server, and openssl (the TLS tests make their certificates with
# scripts/make-certs.sh). LOCKGATE_BIN names the gateway binary; by default
# the repository's release build. Extra arguments go to the JUnit console
# launcher (e.g. --select-class lockgate.WatchTest).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export LOCKGATE_BIN="${LOCKGATE_BIN:-$repo/target/release/lockgate}"
junit="${JUNIT_CONSOLE_JAR:-/usr/share/java/junit-platform-console-standalone.jar}"

missing() {
  echo "run-tests.sh: $1 is not installed ($2)" >&2
  exit 1
}
command -v javac >/dev/null || missing javac "Debian: apt-get install openjdk-17-jdk-headless"
command -v java >/dev/null || missing java "Debian: apt-get install openjdk-17-jdk-headless"
release="$(javac -version 2>&1 | sed -E 's/^javac ([0-9]+).*/\1/')"
[[ "$release" =~ ^[0-9]+$ && "$release" -ge 17 ]] || missing "a JDK 17 or newer (javac is $release)" "Debian: apt-get install openjdk-17-jdk-headless"
[[ -f "$junit" ]] || missing "JUnit 5's console launcher ($junit)" "Debian: apt-get install junit5"
command -v redis-server >/dev/null || missing redis-server "Debian: apt-get install redis-server"
command -v openssl >/dev/null || missing openssl "Debian: apt-get install openssl"
if [[ ! -x "$LOCKGATE_BIN" ]]; then
  echo "run-tests.sh: no gateway binary at $LOCKGATE_BIN (build it with cargo build --release, or set LOCKGATE_BIN)" >&2
  exit 1
fi

build="$here/build"
rm -rf "$build"
mkdir -p "$build"
cd "$here"
# The warnings named here exist in every javac from 17 on, so a newer JDK's
# new ones (such as 21's this-escape) do not fail the build.
lint=cast,deprecation,divzero,empty,fallthrough,finally,overrides,rawtypes,serial,static,unchecked,varargs
javac --release 17 -Xlint:"$lint,try,exports" -Werror -encoding UTF-8 -d "$build/classes" $(find src/main/java -name '*.java')
javac --release 17 -Xlint:"$lint" -Werror -encoding UTF-8 -cp "$build/classes:$junit" -d "$build/test-classes" \
  $(find src/test/java -name '*.java')

# Each test makes its own keys (and, where it breaks them, its own Redis and
# gateway), so classes and methods run concurrently; most of their time is
# spent waiting on leases.
# Without arguments, every test class; with them, what they select.
select=(--scan-class-path)
[[ $# -gt 0 ]] && select=()
set +e
java -Dlockgate.repository="$repo" -Dlockgate.classpath="$build/classes:$build/test-classes" -jar "$junit" \
  --class-path "$build/classes:$build/test-classes" "${select[@]}" \
  --disable-banner --disable-ansi-colors --details=tree --reports-dir "$build/reports" \
  --config=junit.jupiter.execution.parallel.enabled=true \
  --config=junit.jupiter.execution.parallel.mode.default=concurrent \
  --config=junit.jupiter.execution.parallel.mode.classes.default=concurrent \
  --config=junit.jupiter.execution.parallel.config.strategy=fixed \
  --config=junit.jupiter.execution.parallel.config.fixed.parallelism=8 \
  "$@" | tee "$build/output.txt"
status=${PIPESTATUS[0]}
set -e
count() {
  local n
  n="$(sed -nE "s/.*\[ *([0-9]+) tests $1 *\].*/\1/p" "$build/output.txt" | tail -1)"
  echo "${n:-0}"
}
# A test whose assumption does not hold (a gateway without a feature) is "aborted": counted as skipped.
echo "java: $(count successful) passed, $(count failed) failed, $(( $(count skipped) + $(count aborted) )) skipped"
exit "$status"
