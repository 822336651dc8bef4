"""The next runs' workers, started ahead to import their frameworks while this run sets up, kept still (SIGSTOP)
from this run's first step until its last measurement, so that nothing they do shares the host with what is
timed. The runner names them in a file beside the run's spec (harness.session.ahead); a worker started ahead
reads that file only once its run is handed over."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import Iterator

from harness.machine.variables import variables

#: The file beside a run's spec.json that names the process groups to pause while it is timed.
PAUSE_FILE = "pause.json"
#: Where the worker keeps those process groups once it has read the file.
PAUSE_VARIABLE = "HARNESS_PAUSE_PIDS"


def read_pause_file(spec_path: str) -> None:
    """Note, for this process, the process groups the runner asks it to pause (none when there is no file)."""
    path = os.path.join(os.path.dirname(os.path.abspath(spec_path)), PAUSE_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            pids = [int(p) for p in json.load(fh)]
    except (OSError, ValueError, TypeError):
        return
    os.environ[PAUSE_VARIABLE] = ",".join(str(p) for p in pids)


def _signal_group(pid: int, sig: int) -> bool:
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


#: The longest the timed region waits for a paused process to have stopped (a signal is delivered asynchronously).
STOP_WAIT_S = 2.0


def _wait_stopped(pid: int, timeout: float = STOP_WAIT_S) -> None:
    """Return once the process is stopped (state T in /proc), has left, or `timeout` has passed; at once where
    there is no /proc to ask."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("T", "t", "Z", "X"):
            return
        time.sleep(0.001)


@contextlib.contextmanager
def paused() -> Iterator[list[int]]:
    """Stop the process groups named for this run (PAUSE_VARIABLE) for the duration of the block, then let them
    go on; yields those that were stopped. The block starts only once each has stopped; one that has already
    left is skipped."""
    pids = variables().pause_pids
    stopped = [pid for pid in pids if pid != os.getpgrp() and _signal_group(pid, signal.SIGSTOP)]
    for pid in stopped:
        _wait_stopped(pid)
    try:
        yield stopped
    finally:
        for pid in stopped:
            _signal_group(pid, signal.SIGCONT)
