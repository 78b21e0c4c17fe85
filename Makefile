# The commands: `make run`, `make test`, and `make quick` for the inner loop. All create the virtual
# environment if needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test quick lint typecheck unit install services services-stop browser bench faults soak clean

$(STAMP): pyproject.toml examples/tickd-example-plugin/pyproject.toml
	@echo "tickd: installing tickd and its dependencies into $(VENV) (about a minute, once)..."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	# The example plug-in, installed as a product team's would be: tickd must find it by name.
	$(BIN)/python -m pip install --quiet -e examples/tickd-example-plugin
	touch $(STAMP)

install: $(STAMP)

## The daemon on the embedded defaults (SQLite, in-process lock, events in the log, mail in
## var/outbox), with demo jobs. Ctrl-C stops it cleanly.
run: install
	$(BIN)/tickd --config config/tickd.toml run

## Lint, type-check and the whole test suite, against real FerretDB, Redis and Kafka, and the
## dashboard and an alert email in Chromium.
test: services browser lint typecheck unit

## The inner loop, in under two minutes and with no service running: lint, type checks and every
## test that needs neither a real service nor a real daemon (the markers in pyproject.toml), on
## every core, property tests drawing a fifth of their examples (tests/properties.py). `make
## test` still runs everything, in full.
quick: lint typecheck
	QUICK_TESTS=1 $(BIN)/pytest -q -n auto --dist worksteal -m "not services and not slow"
	cd examples/tickd-example-plugin && ../../$(BIN)/pytest -q

## FerretDB (MongoDB protocol, over PostgreSQL), Redis and Kafka on loopback, installed and
## started if missing.
services:
	scripts/services.sh start

services-stop:
	scripts/services.sh stop

## Debian's Chromium, which tests/ui drive through Playwright (never `playwright install`: the
## browser comes from apt, like everything else). Installed only when missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser:
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; }

## Ruff, and the layer contracts of .importlinter (dependencies point one way, no cycles).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

## Two workers for the tests that share the services (each has its own database, key prefix and
## topic), then the system tests alone: they stop and start the services under their daemons.
unit: install
	$(BIN)/pytest -m "not system" -n 2 --dist loadgroup
	$(BIN)/pytest -m system
	cd examples/tickd-example-plugin && ../../$(BIN)/pytest

## Every performance figure and target in one run, side by side (about 23 minutes): bursts and steady load
## through the real daemon on the embedded and the real stack, APScheduler on the same bursts,
## the bare floor of each store, a burst over 1 domain and over 100, a py-spy profile. Tables on stdout, var/bench/results.json and
## .md. Not part of `make test`. BENCH_ARGS passes options (python -m bench.run --help), e.g.
## BENCH_ARGS="--steady-seconds 60 --no-real".
BENCH_STAMP := $(VENV)/.bench-stamp
BENCH_ARGS ?=

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[all,dev,bench]'
	touch $(BENCH_STAMP)

## The fault suite on the real stack: daemons SIGKILLed mid-burst and taken over, outages of
## Redis, Kafka, FerretDB and an SMTP server under real daemons, with figures
## (docs/reliability.md; about 13 minutes). Also part of `make test`.
faults: services install
	$(BIN)/pytest -m system -s

bench: services $(BENCH_STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

## The soak (not part of `make test`): the real daemon on the real stack under steady load for
## 30 minutes, its RSS, fire lag and outbox backlog sampled and judged flat or not
## (docs/reliability.md); var/soak/results.json and .md. SOAK_ARGS passes options
## (python -m bench.soak --help), e.g. SOAK_ARGS="--minutes 3", or
## SOAK_ARGS="--store sqlite --rate 200 --out var/soak-sqlite" (the store embedded, the rest real).
SOAK_ARGS ?=
soak: services install
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
