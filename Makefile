# GPU Fleet Governor. `make demo` and `make test` work on a fresh machine with Python 3.11+ and Node.js.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20,22
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 20,22
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo test explore lint typecheck synth layer layer-clean layer-import-check deploy-check deploy-local bench soak clean \
	screenshots

$(VENV)/.installed: requirements.txt lambdas/requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -e .
	touch $@

$(VENV)/.installed-demo: $(VENV)/.installed requirements-demo.txt
	$(PIP) install -q -r requirements-demo.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-demo requirements-dev.txt
	$(PIP) install -q -r requirements-dev.txt
	touch $@

## demo: validate the policy, synthesize the app with cdk-nag, then run the simulated GPU fleet
##       (e.g. make demo DEMO_ARGS="--enforce", or DEMO_ARGS="--hours 3 --instances 8" for a short run)
DEMO_ARGS ?=
demo: $(VENV)/.installed-demo
	$(VENV)/bin/governor validate governor.yaml
	$(VENV)/bin/governor demo $(DEMO_ARGS)

## test: ruff, mypy, then pytest (unit, adapters on moto, infra with cdk-nag, e2e on the local emulator)
test: $(VENV)/.installed-dev .venv-checkov/.installed lint typecheck
	$(PY) -m pytest -n 2 --dist loadfile

## explore: the property-based tests with random seeds and a kept example database (.hypothesis/), outside CI; pin
##          what it finds with @example (make test and CI run them derandomized: tests/conftest.py)
explore: $(VENV)/.installed-dev
	GOVERNOR_HYPOTHESIS_PROFILE=exploration $(PY) -m pytest tests/reliability/test_fuzz.py \
		tests/reliability/test_fuzz_commands.py $(EXPLORE_ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(VENV)/bin/mypy

synth: $(VENV)/.installed
	$(PY) app.py

## layer: the Lambda dependency layers (one per dependency set the handlers import) for CPython 3.14 arm64, without
##        Docker (cdk.json's build hook runs it)
## It reads the handlers' imports (infra/dependencies.py), so it runs in the project's venv: .venv if there is one,
## else the python3 on PATH (an activated venv).
layer:
	$(if $(wildcard $(PY)),$(PY),python3) -m infra.build_layer  # CPython 3.14 arm64 wheels, verified; kept while current

layer-clean:
	rm -rf build/layer build/layer.partial build/layer-manifest.json

## The pinned CDK CLI (and Pyodide's CPython 3.14) from package-lock.json; the docs run the CLI as `npx cdk`.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## layer-import-check: each function's modules imported on CPython 3.14 against exactly its built layers
layer-import-check: $(VENV)/.installed-demo node_modules/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(MAKE) layer
	$(PY) -m governor_cli.testing.layer_import

## deploy-check: every cdk command README.md, docs/deploy.md and docs/organization.md tell a user to run, verbatim,
##               with the real CDK CLI and its build hook, against the local emulator (slow: not part of make test)
deploy-check: $(VENV)/.installed-demo node_modules/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m governor_cli.testing.deploy_check check

## deploy-local: cdk bootstrap and cdk deploy onto moto's server with the real CLI, then governor status
deploy-local: $(VENV)/.installed-demo node_modules/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m governor_cli.testing.deploy_check local

## checkov in its own venv: its pins (boto3 1.35, policy_sentry 0.13) conflict with ours
.venv-checkov/.installed: requirements-checkov.txt
	python3 -m venv .venv-checkov
	.venv-checkov/bin/pip install -q -r requirements-checkov.txt
	touch $@

bench/.venv-c7n/.installed: bench/requirements-c7n.txt
	python3 -m venv bench/.venv-c7n
	bench/.venv-c7n/bin/pip install -q -r bench/requirements-c7n.txt
	touch $@

## bench: regenerate bench/README.md (side by side with Cloud Custodian and the naive idle rule); not part of test
bench: $(VENV)/.installed-dev bench/.venv-c7n/.installed
	$(PY) -m bench.run

## soak: the long fault-injection run that regenerates RELIABILITY.md
soak: $(VENV)/.installed-dev
	$(PY) -m bench.soak

clean:
	rm -rf cdk.out build out .mypy_cache .ruff_cache .pytest_cache node_modules

## screenshots: regenerate docs/img/ (reports rendered by headless Chromium from real runs); needs chromium
screenshots: $(VENV)/.installed-dev
	PYTHONPATH=lambdas:cli:. $(PY) -m tests.e2e.screenshots
