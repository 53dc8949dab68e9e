# Every target works from a fresh clone: it builds .venv (pinned Python deps) and
# node_modules (the pinned CDK CLI) on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
# The pinned CDK's jsii runtime supports Node.js 22 and 24 (toolkit/node_runtime.py, README). On an
# older release it prints an eleven-line banner per Node process; `make` says it once, in one line,
# and silences the banners.
NODE_MAJOR := $(shell node --version 2>/dev/null | sed -nE 's/^v([0-9]+)\..*/\1/p')
ifeq ($(MAKELEVEL),0)
ifneq ($(NODE_MAJOR),)
ifeq ($(shell test $(NODE_MAJOR) -lt 22 && echo older),older)
$(info warning: Node.js $(NODE_MAJOR) is older than the pinned CDK supports (22 or 24); it still works today, but upgrade Node.js)
endif
endif
endif
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 16,18,20,$(NODE_MAJOR)
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true
PYTEST_ARGS ?=
# `make test` runs pytest in one worker process per core (pytest-xdist; PYTEST_WORKERS=0: in one
# process). Each worker starts its own emulators on free ports and keeps its files in its own
# temporary directories; `--dist loadfile` keeps a test file on one worker, so a module's emulator
# or browser starts once.
PYTEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
PREFLIGHT_ARGS ?=
SOAK_ARGS ?=
UPGRADE_ARGS ?=

.PHONY: help install lock system-packages test lint typecheck unit synth preflight up down status demo chaos upgrade soak bench settings-reference conformance clean

help:
	@echo "make demo    run the whole pipeline locally with faults and prove it exact"
	@echo "make test    ruff, mypy and the whole test suite"
	@echo "make lock    regenerate requirements*.lock (hashes) after a pin changed"
	@echo "make synth   synthesize the CDK app to cdk.out/ (cdk-nag AwsSolutions, cfn-lint and checkov applied)"
	@echo "make preflight  check the AWS account and region before the first deploy (PREFLIGHT_ARGS=\"--region R\")"
	@echo "make up      start the local emulator + runner and deploy the stack into it"
	@echo "make down    stop everything make up started"
	@echo "make status  per-function invocations, errors, retries, records dropped and iterator lag; an ALARM line when records were lost"
	@echo "make chaos   every failure at once, 20,000 messages, plus the unsafe negative control; then KPL aggregates, a quarter hostile"
	@echo "make upgrade each earlier release (local/upgrade/releases.py) upgraded in place mid-stream, exact; and its negative control"
	@echo "make soak    a steady load (SOAK_ARGS=\"--duration S --rate R\"), exact, memory within a budget"
	@echo "make bench   benchmarks and the capacity planner, written to docs/benchmarks.md"
	@echo "make settings-reference  regenerate docs/settings.md from stacks/settings.py (a test fails when it is stale)"
	@echo "make conformance  moto's own DynamoDB, Streams, Kinesis and S3 tests on plain and on patched moto (docs/moto-upstream.md)"

# Supply chain: every Python package is installed from a lock with hashes (`--require-hashes`:
# pip refuses a file whose SHA-256 the lock does not list, and any package the lock does not pin),
# starting with pip itself at its pinned version. The project goes in editable (pyproject.toml: its
# packages, `lambdas/`'s included) without build isolation, so its build backend is the locked
# setuptools, not one fetched unhashed. `make lock` regenerates both locks after a pin changes in
# requirements*.txt or constraints.txt (pip-compile, from the default index with any local pip
# configuration ignored, so the hashes are those of the published files; pip-tools lives only in a
# throwaway venv).
PIP := $(BIN)/python -m pip --quiet --disable-pip-version-check
PIP_TOOLS_VERSION := 7.6.2
$(BIN)/.installed: requirements-pip.lock requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --require-hashes -r requirements-pip.lock
	$(PIP) install --require-hashes -r requirements.lock
	$(PIP) install --no-deps --no-build-isolation --editable .
	touch $@

# checkov (`make synth`, stacks/template_scan.py) gets a venv of its own, from its own hashed lock:
# it pins boto3 1.35 (so botocore 1.35), networkx < 2.7 and packaging < 24, which cannot share
# .venv with our boto3/botocore 1.44.5, networkx 3 and packaging 26 (requirements-checkov.in).
# Wheels only: nothing is built, so no build backend is fetched unhashed.
CHECKOV_VENV := .venv-checkov
CHECKOV_PIP := $(CHECKOV_VENV)/bin/python -m pip --quiet --disable-pip-version-check
$(CHECKOV_VENV)/.installed: requirements-pip.lock requirements-checkov.lock
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_PIP) install --require-hashes -r requirements-pip.lock
	$(CHECKOV_PIP) install --require-hashes --only-binary=:all: -r requirements-checkov.lock
	touch $@

lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip --quiet install pip-tools==$(PIP_TOOLS_VERSION)
	for lock in requirements-pip requirements requirements-checkov; do \
		input=$$lock.in; [ $$lock = requirements ] && input=requirements-lock.in; \
		env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null .lock-venv/bin/pip-compile --quiet --generate-hashes \
			--allow-unsafe --strip-extras --no-emit-index-url \
			--output-file $$lock.lock $$input || exit 1; \
	done
	rm -rf .lock-venv

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# `cdk synth` once at install time (about 10 s), again only when a source that shapes the
# template changed (the deployer's rule: local/deploy/deployer.py, SOURCES_THAT_SHAPE_THE_TEMPLATE),
# so `make up` and `make demo` deploy the assembly already there. `touch`: the target is fresh
# even when the deployer found cdk.out newer than every source and left it alone.
CDK_SOURCES := app.py cdk.json constraints.txt $(shell find stacks lambdas -type f -not -path '*/__pycache__/*' -not -name '*.pyc')
cdk.out/manifest.json: $(CDK_SOURCES) $(BIN)/.installed node_modules/.installed
	$(BIN)/python -m local synth
	touch $@

# What running the pipeline needs; `install` adds checkov, which only `make synth` and the tests use,
# so a newcomer's first `make demo` does not wait for its venv.
RUNTIME := $(BIN)/.installed node_modules/.installed cdk.out/manifest.json
install: $(RUNTIME) $(CHECKOV_VENV)/.installed

# Debian's chromium for the browser tests (apt-get when root; otherwise says what to install).
system-packages:
	bash .ci/system-packages

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy .

unit: install system-packages
	$(BIN)/python -m pytest --numprocesses $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test: lint typecheck unit

# Two templates, each through cfn-lint and checkov (cdk-nag runs inside both syntheses): the default
# one, and cdk.out/hardened with the customer-managed key and every other optional protection on
# (stacks/template_scan.py, HARDENED_CONTEXT; a test keeps the two lists equal).
HARDENED_CONTEXT := -c customerManagedKey=true \
	-c keyAdminRoleArn=arn:aws:iam::111122223333:role/KeyAdmin \
	-c keyUserRoleArns=arn:aws:iam::111122223333:role/Producer \
	-c archiveObjectLockDays=365 \
	-c breakGlassRoleArn=arn:aws:iam::111122223333:role/BreakGlass \
	-c alarmEmail=oncall@example.com
synth: $(BIN)/.installed $(CHECKOV_VENV)/.installed node_modules/.installed
	rm -rf cdk.out
	cdk synth --quiet
	cdk synth --quiet --output cdk.out/hardened $(HARDENED_CONTEXT)
	$(BIN)/python -m stacks.template_lint cdk.out
	$(BIN)/python -m stacks.template_lint cdk.out/hardened
	$(BIN)/python -m stacks.template_scan cdk.out cdk.out/hardened

# Reads the account with the SDK's credentials and region; PREFLIGHT_ARGS="--region eu-west-1 -c key=value".
preflight: $(BIN)/.installed
	$(BIN)/python -m deploy preflight $(PREFLIGHT_ARGS)

up: $(RUNTIME)
	$(BIN)/python -m local up

down: $(BIN)/.installed
	$(BIN)/python -m local down

status: $(BIN)/.installed
	$(BIN)/python -m local status

demo: $(RUNTIME)
	$(BIN)/python -m local demo

chaos: $(RUNTIME)
	$(BIN)/python -m local chaos $(CHAOS_ARGS)
	$(BIN)/python -m local chaos --aggregate --hostile-aggregates 25 --count 6000 --no-control $(CHAOS_ARGS)
	INTERLEAVING_EXAMPLES=300 $(BIN)/python -m pytest -q -p no:cacheprovider tests/lambdas/reduce_function/test_interleavings.py
	ARCHIVE_PROPERTY_EXAMPLES=200 $(BIN)/python -m pytest -q -p no:cacheprovider tests/lambdas/archive_function/test_archive_property.py
	CLI_PROPERTY_EXAMPLES=1500 $(BIN)/python -m pytest -q -p no:cacheprovider tests/toolkit/test_command_line_property.py
	$(MAKE) --no-print-directory upgrade

# Deploys each release of local/upgrade/releases.py from its own tree (synthesized once into
# .local/releases/), sends, upgrades it to this checkout in place mid-stream, sends, verifies
# exactly; then the negative control (the new reducer in mode unsafe-add must be caught).
# In mode crt, the upgrade from a release whose guard does not carry the reduce batches' shape
# (every one listed; stop-17 has no guard) must be refused mid-stream and
# exact once drained (README, "Upgrading in place").
upgrade: $(RUNTIME)
	$(BIN)/python -m local upgrade --negative-control $(UPGRADE_ARGS)
	$(BIN)/python -m local upgrade --from stop-17 --reduce-mode crt
	$(BIN)/python -m local upgrade --from stop-17 --reduce-mode crt --drained

soak: $(RUNTIME)
	$(BIN)/python -m local soak $(SOAK_ARGS)

bench: $(RUNTIME)
	$(BIN)/python -m benchmarks run --output docs/benchmarks.md

# docs/settings.md is generated from stacks/settings.py; tests/stacks/test_settings_reference.py fails when it is stale.
settings-reference: $(BIN)/.installed
	$(BIN)/python -m stacks.settings_reference --write

# moto's own test suites (its sdist at the pinned version, fetched by SHA-256) run on plain moto
# and with every patch of local/emulator; fails on a test only plain moto passes unless
# docs/moto-upstream.md lists it (local/conformance). About 16 minutes on 2 cores, 8 once plain
# moto's outcomes are kept in .local/conformance (until the sdist or a lock changes; CONFORMANCE_ARGS=--fresh).
conformance: $(BIN)/.installed
	$(BIN)/python -m local.conformance $(CONFORMANCE_ARGS)

clean:
	rm -rf cdk.out .local .pytest_cache .mypy_cache .ruff_cache
