# lockgate: the two commands of the README, and the tools behind them.
#   make run    install what is missing, start a local Redis if none answers,
#               serve on 127.0.0.1:8080
#   make test   install what the tests need; fmt check, clippy, every test

SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test lint unit openapi bench

run:
	./scripts/ensure-tools.sh rust redis
	./scripts/local-redis.sh
	$(CARGO) run --release --locked -- serve

test:
	./scripts/ensure-tools.sh rust redis
	$(MAKE) lint
	$(MAKE) unit

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

# cargo-nextest runs each test in its own process, in parallel; plain cargo
# test is the fallback where it is not installed.
unit:
	if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  $(CARGO) nextest run --locked --no-fail-fast; \
	else \
	  $(CARGO) test --locked --no-fail-fast; \
	fi

# Regenerates the checked-in OpenAPI document from the code.
openapi:
	$(CARGO) run --locked --quiet -- openapi > openapi/openapi.json

# The lock benchmark (loadtest/bench-locks.sh): prints the README's figures.
bench:
	./loadtest/bench-locks.sh
