# Environments and tests. See docs/compat.md for the two framework pairs.
#   make setup          current pair (torch 2.14.1, TF 2.21 + Keras 3) in .venv
#   make test           the test suite in .venv (built first if needed)
#   make env-reference  reference pair (torch 2.0.1, TF 2.12 + Keras 2.12, numpy 1.23) in .venv-ref
#   make test-compat    the whole test suite in .venv-ref (built first if needed)
#   make quickstart     harness run scenarios/quickstart.yaml in .venv (built first if needed), then
#                       the backends compared side by side
PYTHON ?= python3
VENV ?= .venv
REF_VENV ?= .venv-ref
PYTEST_ARGS ?= -q

.PHONY: setup test env-reference test-compat quickstart

setup:
	PYTHON=$(PYTHON) scripts/make-env.sh $(VENV) current

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS) tests

env-reference:
	PYTHON=$(PYTHON) scripts/make-env.sh $(REF_VENV) reference

test-compat: env-reference
	$(REF_VENV)/bin/python -m pytest $(PYTEST_ARGS) tests

quickstart: setup
	$(VENV)/bin/harness run scenarios/quickstart.yaml
	$(VENV)/bin/harness compare --by backend
