# Environments and tests. See docs/compat.md for the framework pairs.
#   make setup          current pair in .venv: torch 2.14.1 (the registry's CUDA build), TF 2.21 CPU build + Keras 3
#   make setup-gpu      the same with TensorFlow's GPU build (tensorflow[and-cuda]) in .venv, for NVIDIA GPUs;
#                       afterwards setup, test and quickstart keep using it
#   make test           the test suite in .venv (built first if needed), then the plugins' own tests
#   make env-reference  reference pair (torch 2.0.1, TF 2.12 + Keras 2.12, numpy 1.23) in .venv-ref
#   make test-compat    the whole test suite in .venv-ref (built first if needed)
#   make quickstart     harness run scenarios/quickstart.yaml in .venv (built first if needed), then
#                       the backends compared side by side
PYTHON ?= python3
VENV ?= .venv
REF_VENV ?= .venv-ref
# two pytest workers (pytest-xdist), which the suite's 2-core CI keeps busy: most tests wait on a framework's
# worker process; --dist loadgroup keeps the tests of the one Slurm node in one worker
PYTEST_ARGS ?= -q -n 2 --dist loadgroup
# the pair `make setup` builds: gpu once `make setup-gpu` has built $(VENV) with it, else current
PAIR ?= $(if $(filter pair=gpu,$(shell cat $(VENV)/.harness-env 2>/dev/null)),gpu,current)

# printed after setup: harness is in the venv, not on PATH
define HOW_TO_RUN
@echo
@echo "harness is installed in $(VENV), not on your PATH. Run it as $(VENV)/bin/harness"
@echo "(e.g. $(VENV)/bin/harness run quickstart), or first, in this shell: source $(VENV)/bin/activate"
endef
# setup says it unless quickstart, which says it at its end, is asked for too
SETUP_HOW_TO_RUN = $(if $(filter quickstart,$(MAKECMDGOALS)),,$(HOW_TO_RUN))

.PHONY: setup setup-gpu test env-reference test-compat quickstart

setup:
	PYTHON=$(PYTHON) scripts/make-env.sh $(VENV) $(PAIR)
	$(SETUP_HOW_TO_RUN)

setup-gpu:
	PYTHON=$(PYTHON) scripts/make-env.sh $(VENV) gpu
	$(HOW_TO_RUN)

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS) tests
	@# the JAX backend plugin's tests, where it is installed (scripts/make-env.sh installs it in the current pair)
	@if $(VENV)/bin/python -c 'import importlib.metadata as m; m.version("harness-jax")' 2>/dev/null; then \
		echo "$(VENV)/bin/python -m pytest $(PYTEST_ARGS) plugins/harness-jax/tests"; \
		$(VENV)/bin/python -m pytest $(PYTEST_ARGS) plugins/harness-jax/tests; \
	else echo "make test: the harness-jax plugin is not installed in $(VENV); its tests were not run"; fi
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS) plugins/harness-mlp/tests

env-reference:
	PYTHON=$(PYTHON) scripts/make-env.sh $(REF_VENV) reference

test-compat: env-reference
	$(REF_VENV)/bin/python -m pytest $(PYTEST_ARGS) tests
	$(REF_VENV)/bin/python -m pytest $(PYTEST_ARGS) plugins/harness-mlp/tests

quickstart: setup
	$(VENV)/bin/harness run scenarios/quickstart.yaml
	$(VENV)/bin/harness compare --by backend --session latest
	$(HOW_TO_RUN)
	@echo "Next: $(VENV)/bin/harness report (plots in reports/report.html), or see README.md, 'A worked example'."
