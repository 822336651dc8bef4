import os
import sys
from pathlib import Path

import pytest
import yaml

# Tables are laid out as for a pipe (harness.present.fitting.DEFAULT_WIDTH) whatever runs the suite: a pytest-xdist
# worker starts with COLUMNS=80, a developer's shell may export its own. Tests of widths set COLUMNS themselves.
for _variable in ("COLUMNS", "LINES"):
    os.environ.pop(_variable, None)

# TF 2.12 imported before torch 2.0.x kills the process at `import torch` (docs/compat.md), and
# pytest collects test_tf_backend.py before test_torch_backend.py: import torch first.
try:
    import torch  # noqa: F401
except ImportError:
    pass
# Triton (torch.compile's) imported after TensorFlow 2.21 segfaults (docs/compat.md): a test compiling a torch
# step after another loaded TensorFlow in this process would crash the suite. Import it first.
try:
    import triton  # noqa: F401
except ImportError:
    pass

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _own_timing_lock(tmp_path_factory):
    """The suite's own host-wide timing lock (harness.worker.hostlock): its workers neither wait for a harness
    session timing runs on this host (another suite, a benchmark) nor keep one waiting, so that no test's events
    or durations depend on what else runs here. Tests of the lock set a file of their own."""
    variable = "HARNESS_HOST_LOCK"
    before = os.environ.get(variable)
    os.environ[variable] = str(tmp_path_factory.mktemp("timing-lock") / "timing.lock")
    yield
    if before is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = before


@pytest.fixture
def fake_backend(monkeypatch):
    """Register tests.fake_backend as backend `fake` for this test and its worker processes."""
    monkeypatch.setenv("HARNESS_BACKENDS", "fake=tests.fake_backend:FakeBackend")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return "fake"


@pytest.fixture
def write_scenario(tmp_path):
    """Write a scenario mapping (or raw text) to a YAML file and return its path."""

    def _write(data, name="scenario.yaml"):
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return str(path)

    return _write


@pytest.fixture
def harness_cli(tmp_path):
    """Run the real `harness` command in a subprocess: returns (exit code, stdout, stderr)."""
    import subprocess

    def _run(*args, timeout=600, env=None):
        proc = subprocess.run(
            [sys.executable, "-m", "harness", *args],
            capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
            env={**os.environ, **(env or {})},
        )
        return proc.returncode, proc.stdout, proc.stderr

    return _run


#: Counts the reliability tests add to; printed at the end of the session and kept in docs/reliability.md.
from collections import Counter  # noqa: E402

RELIABILITY: Counter = Counter()


def pytest_sessionfinish(session):
    """Under pytest-xdist, a worker hands its counts to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["reliability"] = dict(RELIABILITY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller adds up what each pytest-xdist worker counted."""
    RELIABILITY.update(getattr(node, "workeroutput", {}).get("reliability", {}))


def pytest_terminal_summary(terminalreporter):
    if RELIABILITY:
        terminalreporter.section("reliability counts")
        for key, value in sorted(RELIABILITY.items()):
            terminalreporter.write_line(f"{key}: {value}")
