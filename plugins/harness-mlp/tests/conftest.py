"""The plugin's tests run from the repository root: `.venv/bin/python -m pytest plugins/harness-mlp/tests`.

They need harness (the repository root) and the plugin (installed with `pip install -e plugins/harness-mlp`, or
its folder) on sys.path, and the workload registered: HARNESS_WORKLOADS names it, so an uninstalled plugin is
found too. Both reach the processes a test starts (`harness run` and its workers) through the environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parent.parent
ROOT = PLUGIN.parent.parent
WORKLOAD = "mlp_train=harness_mlp:MLP_TRAIN"

for path in (str(ROOT), str(PLUGIN)):
    if path not in sys.path:
        sys.path.insert(0, path)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(PLUGIN), os.environ.get("PYTHONPATH")]))
if "mlp_train=" not in os.environ.get("HARNESS_WORKLOADS", ""):
    os.environ["HARNESS_WORKLOADS"] = ",".join(filter(None, [os.environ.get("HARNESS_WORKLOADS"), WORKLOAD]))
# tables laid out as for a pipe, whatever runs the tests (tests/conftest.py says why)
for _variable in ("COLUMNS", "LINES"):
    os.environ.pop(_variable, None)

# torch, then Triton, before anything that may pull in TensorFlow (tests/conftest.py and docs/compat.md say why):
# this folder trains the same workload through torch, TensorFlow and JAX in one pytest process
for _module in ("torch", "triton"):
    try:
        __import__(_module)
    except ImportError:
        pass


@pytest.fixture(scope="session", autouse=True)
def _own_timing_lock(tmp_path_factory):
    """The tests' own host-wide timing lock (harness.worker.hostlock), as the core's suite has: the sessions they
    start neither wait for another harness session on this host nor keep one waiting."""
    variable = "HARNESS_HOST_LOCK"
    before = os.environ.get(variable)
    os.environ[variable] = str(tmp_path_factory.mktemp("timing-lock") / "timing.lock")
    yield
    if before is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = before
