# lockgate: the two commands of the README, and the tools behind them.
#   make run          install what is missing, start a local Redis if none
#                     answers, serve on 127.0.0.1:8080 (the admin token is
#                     made at the first start and kept in .run/admin-token)
#   make test         install what the tests need; fmt check, clippy, every
#                     test (the lock and sale suites also against a Redis
#                     Cluster), contract fuzzing, then the short k6 load tests
#                     against three instances behind nginx
#   make cluster      Redis + three instances + nginx on loopback, in the
#                     foreground (Ctrl-C stops all); make cluster-down cleans
#                     up after a crash
#   make loadtest     the full k6 load tests (loadtest/run.sh)
#   make bench        the benchmarks behind the README's Performance figures
#   make openapi      regenerate openapi/openapi.json from the code

SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test lint unit cluster-suite fuzz e2e cluster cluster-down loadtest bench openapi

run:
	./scripts/ensure-tools.sh rust redis
	./scripts/local-redis.sh
	LOCKGATE_ADMIN_TOKEN="$${LOCKGATE_ADMIN_TOKEN:-$$(./scripts/admin-token.sh)}" \
	  $(CARGO) run --release --locked -- serve

test:
	./scripts/ensure-tools.sh rust redis nginx k6 schemathesis
	$(MAKE) lint
	$(MAKE) unit
	$(MAKE) cluster-suite
	$(MAKE) fuzz
	$(MAKE) e2e

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

# cargo-nextest where installed (each test in its own process, in
# parallel), else cargo test: scripts/run-tests.sh chooses.
unit:
	CARGO=$(CARGO) ./scripts/run-tests.sh

# The lock, lock-kind, fair-queue, watch, idempotent-acquire, flash-sale and
# streamed-lock suites again, each test against its own three-master Redis Cluster.
cluster-suite:
	CARGO=$(CARGO) LOCKGATE_TEST_REDIS=cluster ./scripts/run-tests.sh locks:: lock_kinds:: fair_queue:: watching:: idempotent:: seckill:: streams::

# schemathesis against the served OpenAPI document of a running gateway.
fuzz:
	./scripts/fuzz-contract.sh

# Runs after the other tests, not beside them: it loads both cores.
e2e:
	./loadtest/run.sh --short

cluster:
	./scripts/cluster.sh up

cluster-down:
	./scripts/cluster.sh stop

loadtest:
	./loadtest/run.sh

bench:
	./loadtest/bench-locks.sh
	./loadtest/bench-seckill.sh

openapi:
	$(CARGO) run --locked --quiet -- openapi > openapi/openapi.json
