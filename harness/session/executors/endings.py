"""How a Slurm job that has ended becomes its run's record: what the worker wrote, else how Slurm ended the job
(TIMEOUT is `timeout`, OUT_OF_MEMORY `oom`; a node failure, a preemption or a cancellation `failed`, the error
saying which), with Slurm's state, the job id, the node and the GPUs in the record's `slurm` note. A job that
squeue no longer lists is asked of sacct, then of its own files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness.results.record import Result, utc_now
from harness.seam.runspec import RunSpec
from harness.session.executors import queue
from harness.session.executors.job import Placement
from harness.session.worker_process import (
    read_worker_result,
    with_evidence,
    with_written,
)

#: Seconds a submitted job may be missing from squeue before it is asked of sacct and its own files.
LIST_GRACE_S = 30.0
#: The state of a job recorded lost: unresolved (no listing, no accounting, no files of its own) for too long.
LOST = "LOST"
#: The run's status and what the error says, for a job that ended without a result, by Slurm's state.
ENDINGS = {
    "TIMEOUT": ("timeout", "Slurm ended job {job} at its time limit ({limit}) before the run wrote a result"),
    "OUT_OF_MEMORY": ("oom", "Slurm ended job {job}: out of memory (the job's memory limit)"),
    "NODE_FAIL": ("failed", "node failure: Slurm lost node {node} while job {job} ran"),
    "PREEMPTED": ("failed", "preempted: Slurm preempted job {job} before the run wrote a result"),
    "CANCELLED": ("failed", "cancelled: job {job} was cancelled (scancel) before the run wrote a result"),
    LOST: ("failed", "lost: how Slurm job {job} ended could not be told"),
}


def told_elsewhere(job_id: str, folder: Path) -> queue.JobState | None:
    """A job's state without squeue: from sacct where the cluster keeps accounting, else its end from its own
    files in `folder` (exit.json, written when its worker has ended); None where neither tells anything."""
    state = queue.accounted(job_id)
    if state is not None:
        return state
    ended = _exit(folder)
    if ended is not None:
        return queue.JobState("COMPLETED" if ended["returncode"] == 0 else "FAILED")
    return None


def unlisted_end(job_id: str, folder: Path, submitted_at: float) -> queue.JobState | None:
    """The end of a job squeue no longer lists: from sacct, else from its own files in `folder`; None while it may
    yet be listed (submitted, on time.monotonic(), less than LIST_GRACE_S ago) or sacct says it has not ended."""
    if time.monotonic() - submitted_at < LIST_GRACE_S:
        return None
    state = told_elsewhere(job_id, folder)
    if state is not None:
        return state if state.ended else None
    return queue.JobState("FAILED", "Slurm no longer lists the job and keeps no accounting of it")


def lost(why: str, waited_s: float) -> queue.JobState:
    """The state of a job unresolved for `waited_s` seconds: recorded lost, the error saying why."""
    return queue.JobState(LOST, f"nothing told how it stood for {waited_s:.0f} s: {why}")


def job_record(spec: RunSpec, folder: Path, job_id: str, state: queue.JobState, time_limit: str | None,
               compile_cache: str | None = None) -> Result:
    """A run's record once its job has ended: what the worker wrote in `folder`, else how Slurm ended the job
    (`time_limit`: the jobs' --slurm-time, None for the run's timeout). `compile_cache`: the state the submitter
    gave its caches; `warm` where the job found the configuration's shared cache already filled."""
    placement = Placement.of(_read(folder / "placement.json"))
    cache = "warm" if compile_cache == "cold" and placement.compile_cache_found else compile_cache
    result = Result.planned(spec).updated(started_at=placement.started_at or utc_now())
    written = read_worker_result(folder / "result.json")
    if written is not None:
        result = with_written(result, written)
    else:
        result = result.updated(**ending(job_id, folder, state, time_limit))
    result = with_evidence(result, folder / "worker.log")
    slurm = {"job_id": job_id, "state": state.state, "reason": state.reason or None,
             "node": placement.node or state.node or None, "gpus": placement.gpus, "partition": placement.partition}
    return result.with_note("slurm", slurm).updated(compile_cache=cache)


def ending(job_id: str, folder: Path, state: queue.JobState, time_limit: str | None) -> dict:
    """status and error of a job that ended without a result."""
    limit = time_limit or "the run's timeout"
    status, text = ENDINGS.get(state.state, ("failed", "Slurm job {job} ended {state} before the run wrote a "
                                                        "result"))
    error = text.format(job=job_id, limit=limit, node=state.node or "?", state=state.state)
    ended = _exit(folder)
    if ended is not None and state.state not in ENDINGS:
        error = f"worker exited with code {ended['returncode']} before writing a result (Slurm job {job_id})"
    if state.reason:
        error += f" ({state.reason})" if state.state == LOST else f" (Slurm's reason: {state.reason})"
    return {"status": status, "error": error}


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _exit(folder: Path) -> dict | None:
    """The job's exit.json ({"returncode": code}, the code None where it is missing); None before the worker ended."""
    ended = _read(folder / "exit.json")
    return {"returncode": None, **ended} if isinstance(ended, dict) else None
