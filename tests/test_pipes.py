"""`harness ... | head`: a reader that closes the pipe leaves the command's own exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_compare import processes, store_records

ROOT = Path(__file__).resolve().parents[1]


def _closed_pipe(*args) -> tuple[int, str]:
    """Run `python -m harness ARGS` with its standard output a pipe whose reader is gone before it writes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "harness-jax")])}
    read, write = os.pipe()
    os.close(read)  # the reader has gone: the first write meets a closed pipe
    proc = subprocess.run([sys.executable, "-m", "harness", *map(str, args)], stdout=write, stderr=subprocess.PIPE,
                          text=True, cwd=ROOT, env=env, timeout=120)
    os.close(write)
    return proc.returncode, proc.stderr


def _two_sessions(tmp_path, change):
    return store_records(tmp_path / "h.db", processes(1000.0, session="before", seed=40)
                         + processes(1000.0 * (1 + change), session="after", seed=41))


def test_a_closed_pipe_exits_0_where_nothing_failed(tmp_path):
    path = _two_sessions(tmp_path, 0.0)
    for args in (("compare", "--store", path, "--by", "session_id"), ("results", "--store", path), ("list",)):
        code, err = _closed_pipe(*args)
        assert code == 0, (args, err)
        assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_regression_still_exits_1_through_a_closed_pipe(tmp_path):
    path = _two_sessions(tmp_path, -0.10)
    code, err = _closed_pipe("compare", "--store", path, "--session", "before", "--session", "after",
                             "--fail-if-slower", 5)
    assert code == 1, err
    assert "Traceback" not in err


def test_a_full_standard_output_is_one_line_and_exit_1_not_a_traceback(tmp_path):
    path = _two_sessions(tmp_path, 0.0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "harness-jax")])}
    for args in (("compare", "--store", path, "--by", "session_id"), ("results", "--store", path),
                 ("results", "--store", path, "--format", "json")):
        with open("/dev/full", "w") as full:  # every write: ENOSPC
            proc = subprocess.run([sys.executable, "-m", "harness", *map(str, args)], stdout=full,
                                  stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=120)
        # before: an OSError [Errno 28] traceback from click.echo
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert proc.stderr.strip().splitlines() == [
            "error: standard output could not be written (No space left on device): what it holds is incomplete"]
