# lockgate: the two commands of the README, and the tools behind them.
#   make run          install what is missing, start a local Redis if none
#                     answers, serve on 127.0.0.1:8080 (the admin token is
#                     made at the first start and kept in .run/admin-token)
#   make test         install what the tests need; fmt check, clippy, every
#                     test (the lock, sale and hand-off suites also against a
#                     Redis Cluster), the previous release beside this one
#                     (upgrade-short, building it from the history), contract fuzzing, the Python,
#                     TypeScript, Go and Java clients' suites, the console in Chromium,
#                     the docs' examples against a real gateway,
#                     the alert rules (promtool) and a Prometheus server
#                     evaluating the rules and dashboard over three gateways,
#                     the short k6 load tests against three instances behind
#                     nginx, then the short fault run (as root); each stage
#                     within a bound (scripts/stage.sh), its time printed
#   make model        the protocol's model checked to a deeper bound
#   make conformance  the model against the real scripts alone (make test
#                     runs it seeded); SEED= SEQUENCES= STEPS= for more
#   make chaos        every fault scenario across network namespaces (root);
#                     RANDOM=N [SEED=S]: a random schedule of faults for N minutes
#   make cluster      Redis + three instances + nginx on loopback, in the
#                     foreground (Ctrl-C stops all); make cluster-down cleans
#                     up after a crash
#   make loadtest     the full k6 load tests (loadtest/run.sh)
#   make bench        the benchmarks behind docs/performance.md
#   make anchors      lockgate beside etcd, ZooKeeper + Curator, redlock and
#                     python-redis-lock, one node each (a few minutes)
#   make package      the Debian package and the container image;
#                     make package-test tests both (root)
#   make openapi      regenerate openapi/openapi.json from the code
#   make upgrade      the previous release beside this one: every mix of three
#                     on one Redis and on a Cluster, then a rolling upgrade and
#                     a rollback behind nginx under k6 (a few minutes)

SHELL := /bin/bash
CARGO ?= cargo

.PHONY: package package-deb package-test run test lint observability script-tests unit model-check model conformance cluster-suite fuzz clients console docs e2e chaos chaos-short cluster cluster-down loadtest bench anchors openapi

run:
	./scripts/ensure-tools.sh rust redis sqlite curl
	./scripts/local-redis.sh
	mkdir -p .run
	LOCKGATE_ADMIN_TOKEN="$${LOCKGATE_ADMIN_TOKEN:-$$(./scripts/admin-token.sh)}" \
	LOCKGATE_ORDERS_DATABASE="$${LOCKGATE_ORDERS_DATABASE:-sqlite://.run/orders.db}" \
	  $(CARGO) run --release --locked -- serve

test:
	./scripts/ensure-tools.sh rust redis sqlite curl nginx k6 schemathesis postgresql python-venv node chromium go java systemd-analyze prometheus otlp-proto
	MAKE="$(MAKE)" ./scripts/stage.sh lint 10
	MAKE="$(MAKE)" ./scripts/stage.sh script-tests 3
	MAKE="$(MAKE)" ./scripts/stage.sh unit 20
	MAKE="$(MAKE)" ./scripts/stage.sh upgrade-short 10
	MAKE="$(MAKE)" ./scripts/stage.sh model-check 8
	MAKE="$(MAKE)" ./scripts/stage.sh cluster-suite 12
	MAKE="$(MAKE)" ./scripts/stage.sh fuzz 15
	MAKE="$(MAKE)" ./scripts/stage.sh clients 15
	MAKE="$(MAKE)" ./scripts/stage.sh console 6
	MAKE="$(MAKE)" ./scripts/stage.sh docs 5
	MAKE="$(MAKE)" ./scripts/stage.sh observability 4
	MAKE="$(MAKE)" ./scripts/stage.sh package-deb 10
	MAKE="$(MAKE)" ./scripts/stage.sh e2e 6
	MAKE="$(MAKE)" ./scripts/stage.sh chaos-short 8

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

# The project scripts' own tests that need no gateway: the anchors
# benchmark's probes (real sockets).
script-tests:
	python3 -m unittest discover -s loadtest/anchors -p 'test_*.py'

# cargo-nextest where installed (each test in its own process, in
# parallel), else cargo test: scripts/run-tests.sh chooses.
unit:
	CARGO=$(CARGO) ./scripts/run-tests.sh

# The protocol's model (model/, stateright): every interleaving up to a
# bound, about two minutes; `make model` goes deeper (the better part of an hour).
model-check:
	$(CARGO) fmt --manifest-path model/Cargo.toml -- --check
	$(CARGO) clippy --locked --manifest-path model/Cargo.toml --all-targets -- -D warnings
	$(CARGO) run --release --locked --manifest-path model/Cargo.toml -- test --quiet

model:
	$(CARGO) run --release --locked --manifest-path model/Cargo.toml -- test --deep --quiet

# The model checked against the scripts (tests/conformance): seeded
# sequences of script steps applied to the model and, through the gateway's
# wrappers, to a real redis-server, compared after each; and each mutant of
# the Lua caught. A test of the main crate, so `make unit` (and make test)
# runs it already, seeded (120 sequences, at most about a minute); this runs
# it alone. SEED= (the first seed) SEQUENCES= STEPS= TICK_MS= PARALLEL= TRACE=1
# (every sequence printed); TESTS= a test name filter (the_scripts: not the
# mutants).
conformance:
	CONFORMANCE_SEED="$(SEED)" CONFORMANCE_SEQUENCES="$(SEQUENCES)" \
	CONFORMANCE_STEPS="$(STEPS)" CONFORMANCE_TICK_MS="$(TICK_MS)" \
	CONFORMANCE_PARALLEL="$(PARALLEL)" CONFORMANCE_TRACE="$(TRACE)" \
	  $(CARGO) test --locked --test conformance -- --nocapture $(TESTS)

# The lock, lock-kind, fair-queue, watch, idempotent-acquire, flash-sale and
# streamed-lock suites again, each test against its own three-master Redis Cluster.
cluster-suite:
	CARGO=$(CARGO) LOCKGATE_TEST_REDIS=cluster ./scripts/run-tests.sh locks:: lock_kinds:: fair_queue:: watching:: idempotent:: seckill:: streams:: orders:: sessions:: batch:: modes::

# schemathesis against the served OpenAPI document of a running gateway.
fuzz:
	./scripts/fuzz-contract.sh

# The client libraries' suites (Python, TypeScript, Go, Java), against the release binary.
clients:
	$(CARGO) build --release --locked --quiet --bin lockgate
	./clients/python/run-tests.sh
	./clients/typescript/run-tests.sh
	./clients/go/run-tests.sh
	./clients/java/run-tests.sh

# The console in a real Chromium, against the release binary.
console:
	$(CARGO) build --release --locked --quiet --bin lockgate
	./console/run-tests.sh

# The README's and docs/using.md's marked examples against the release binary
# and a real Redis (scripts/check-docs.py), after the checker's own tests.
docs:
	$(CARGO) build --release --locked --quiet --bin lockgate
	python3 -m unittest discover -s scripts/check-docs-tests
	./scripts/check-docs.py

# The alert rules' promtool tests, then a Prometheus server scraping three
# gateways under a short load: every expression of the rules and of the
# dashboard answered (ops/, docs/alerts.md).
observability:
	$(CARGO) build --release --locked --quiet --bin lockgate
	LOCKGATE_BIN=target/release/lockgate ./scripts/test-observability.sh

# Runs after the other tests, not beside them: it loads both cores.
e2e:
	./loadtest/run.sh --short

# Faults across a real network (network namespaces; needs root): every
# scenario, or the two that make test runs.
chaos:
	if [ "$$(id -u)" -eq 0 ]; then CHAOS_RANDOM="$(RANDOM)" CHAOS_SEED="$(SEED)" ./chaos/run.sh; else sudo CHAOS_RANDOM="$(RANDOM)" CHAOS_SEED="$(SEED)" ./chaos/run.sh; fi

chaos-short:
	if [ "$$(id -u)" -eq 0 ]; then ./chaos/run.sh --short; else sudo ./chaos/run.sh --short; fi

cluster:
	./scripts/cluster.sh up

cluster-down:
	./scripts/cluster.sh stop

loadtest:
	./loadtest/run.sh

bench:
	./loadtest/bench-locks.sh
	./loadtest/gateway-cost.sh
	./loadtest/bench-redis-cost.sh
	./loadtest/bench-sessions.sh
	./loadtest/bench-seckill.sh
	./loadtest/bench-segments.sh
	./loadtest/bench-tls.sh

# The peers are installed by scripts/ensure-anchors.sh (Debian, npm, PyPI).
anchors:
	./loadtest/anchors/run.sh

# The Debian package (target/debian/lockgate_<version>_<arch>.deb, cargo-deb)
# and the container image (lockgate:<version>, podman), and their tests
# (as root: dpkg -i/-r/-P with lintian; the image's root under chroot).
# make test runs the package's (package-deb).
package:
	./scripts/build-package.sh
	./scripts/build-image.sh

package-deb:
	if [ "$$(id -u)" -eq 0 ]; then ./scripts/test-package.sh; else sudo ./scripts/test-package.sh; fi

package-test: package-deb
	if [ "$$(id -u)" -eq 0 ]; then ./scripts/test-image.sh; else sudo ./scripts/test-image.sh; fi

openapi:
	$(CARGO) run --locked --quiet -- openapi > openapi/openapi.json

# The previous release (0.1.0) built from the history (scripts/build-release.sh,
# cached in target/releases) beside this build, as real processes on one
# Redis: a few mixed-version checks (make test's short form), or every one
# and then the rolling upgrade behind nginx under k6 (loadtest/upgrade/run.sh).
.PHONY: upgrade-short upgrade
upgrade-short:
	CARGO=$(CARGO) ./tests/upgrade/run.sh short_

upgrade:
	CARGO=$(CARGO) ./tests/upgrade/run.sh
	./loadtest/upgrade/run.sh
