"""The worker: executes one run in its own process (`python -m harness.worker SPEC.json RESULT.json`).

Frameworks are imported here (by the backend, through harness.worker.execute) and only here. The result is
written as JSON (never pickle), atomically, so the runner sees either a whole result or none.
"""

from __future__ import annotations

import json
import os
import sys
import time

from harness.machine.variables import variables
from harness.results.record import write_json_atomic
from harness.seam.backend import available_backends
from harness.seam.distributed import Replica, rank_result_path, register_pid
from harness.seam.runspec import RunSpec
from harness.worker.execute import execute
from harness.worker.neighbours import read_pause_file


def apply_memory_limit() -> None:
    """Cap this process's data segment at HARNESS_MEMORY_LIMIT_BYTES (a smaller machine, emulated).

    RLIMIT_DATA bounds private writable memory (heap and anonymous mappings, Linux >= 4.7), so
    framework allocations beyond it fail as out-of-memory errors, while the large virtual
    reservations of shared libraries that RLIMIT_AS would also count do not.
    """
    value = variables().memory_limit_bytes  # the runner checked it (harness.commands.run.parse_size)
    if value is None:
        return
    import resource  # POSIX only, and needed only under --memory-limit

    if value <= 0:
        raise ValueError(f"HARNESS_MEMORY_LIMIT_BYTES={value!r}: expected a positive number of bytes")
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY and value > hard:
        value = hard  # an unprivileged process cannot raise its hard limit; the lower one applies
    resource.setrlimit(resource.RLIMIT_DATA, (value, value))


#: Seconds between two looks for the spec of a worker started ahead (harness.worker --ahead).
AHEAD_POLL_S = 0.02


def wait_for_run(backend_name: str, run_dir: str, parent: int) -> float | None:
    """A worker started ahead of its run: import the backend's framework, then wait for RUN_DIR/spec.json.

    The runner starts the next capacity probe's worker while the current probe runs, so the framework's
    import (seconds for TensorFlow) is done by the time the next batch size is known. Returns the seconds
    the imports took, or None if the runner (pid `parent`) went away first: this worker then leaves without
    running. The runner's pid comes on the command line: one that died while this process started would
    already have left it an orphan by the time it could ask for its parent.
    """
    started = time.perf_counter()
    try:
        available_backends()[backend_name].preload()
    except Exception:  # noqa: BLE001 - the run meets the same error again, and records it
        pass
    imported = time.perf_counter() - started
    spec = os.path.join(run_dir, "spec.json")
    while not os.path.exists(spec):
        if os.getppid() != parent:
            return None
        time.sleep(AHEAD_POLL_S)
    return imported


def main(argv: list[str] | None = None) -> int:
    """Run the spec file's run and write its result file; the exit status (1: a replica that failed)."""
    argv = sys.argv[1:] if argv is None else argv
    ahead = None
    if argv and argv[0] == "--ahead":  # python -m harness.worker --ahead BACKEND RUN_DIR RUNNER_PID
        _, backend_name, run_dir, parent = argv
        try:
            apply_memory_limit()  # before any import, as for every worker
        except (ValueError, OverflowError, OSError):
            pass  # applied again below, where its failure becomes the result
        ahead = wait_for_run(backend_name, run_dir, int(parent))
        if ahead is None:
            return 0
        argv = [os.path.join(run_dir, "spec.json"), os.path.join(run_dir, "result.json")]
    spec_path, result_path = argv

    replica = Replica.from_env()
    if replica is not None:
        # one replica of a data-parallel run: its own result file; its pid noted so the runner can end it
        register_pid(result_path, replica.rank)
        result_path = str(rank_result_path(result_path, replica.rank))
    try:
        apply_memory_limit()
    except (ValueError, OverflowError, OSError) as exc:  # a result that says why, not a traceback
        write_json_atomic(result_path, {"status": "failed", "error": f"the memory limit could not be applied: "
                                        f"{type(exc).__name__}: {exc}"})
        return 0
    with open(spec_path, encoding="utf-8") as fh:
        spec = RunSpec.from_dict(json.load(fh))
    read_pause_file(spec_path)
    result = execute(spec)
    if ahead is not None:  # not part of duration_s: it ran before the run was handed over
        result.phases_s = {**(result.phases_s or {}), "imported_ahead": round(ahead, 3)}
    write_json_atomic(result_path, result.to_dict())
    if replica is not None and result.status != "ok":
        # a replica that failed leaves with an error, so its launcher (torchrun, the runner) ends its peers
        # at once instead of leaving them waiting in an all-reduce this replica will never join
        return 1
    return 0
