"""The jobs an earlier submitter of the same session left behind (killed, its terminal gone, its machine
rebooted): found by the job ids it wrote beside each run's spec, so that `--resume` takes in every result
they wrote and waits for the ones still queued or running instead of submitting their runs again.

Each run's folder (`folder/SESSION/NNNNNN-RUN_ID/`) holds `spec.json` and, once its array is submitted,
`job.json` (the job id, `ARRAY_TASK`). A job is adopted (waited for, its record stored as any other)
where it still runs or is queued, or where it wrote a result; one that ended without a result, or that
Slurm and its own files know nothing of, is not: its run is submitted again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.results.record import write_json_atomic
from harness.session.executors import queue
from harness.session.executors.endings import told_elsewhere
from harness.session.plan import RunSpec

#: The file beside a run's spec that names its Slurm job.
JOB_FILE = "job.json"


@dataclass(frozen=True)
class EarlierJob:
    """A job an earlier submitter of the session submitted: its run's spec, folder and job id."""

    spec: RunSpec
    folder: Path
    job_id: str
    #: the compile-cache state its submitter gave the run
    compile_cache: str | None = None


def note_job(folder: Path, job_id: str, compile_cache: str | None) -> None:
    """Write the job id of a run's job, and the compile-cache state it was given, beside its spec (for a later
    `--resume` to find)."""
    write_json_atomic(folder / JOB_FILE, {"job_id": job_id, "compile_cache": compile_cache})


def earlier_jobs(root: Path) -> list[EarlierJob]:
    """Every job submitted for the session whose jobs' files are under `root`, in plan order (unreadable ones
    left out)."""
    found = []
    for job_file in sorted(root.glob(f"*/{JOB_FILE}")):
        try:
            noted = json.loads(job_file.read_text(encoding="utf-8"))
            spec = RunSpec.from_dict(json.loads((job_file.parent / "spec.json").read_text(encoding="utf-8")))
            found.append(EarlierJob(spec, job_file.parent, str(noted["job_id"]), noted.get("compile_cache")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def to_adopt(earlier: list[EarlierJob], stored_run_ids: set[str]) -> tuple[list[EarlierJob], list[str]]:
    """(the earlier jobs whose runs are not stored yet and that still run, are queued or wrote a result; the job ids
    of the others that Slurm may still hold, to cancel). Where squeue cannot answer, every job whose run is not
    stored is adopted: the submitter's bound on unresolved jobs (`lost_after_s`) then decides."""
    pending = [e for e in earlier if e.spec.run_id not in stored_run_ids]
    listed = queue.poll([e.job_id for e in pending])
    adopt, drop = [], []
    for job in pending:
        wrote = (job.folder / "result.json").exists()
        state = None if listed.states is None else listed.states.get(job.job_id) or \
            told_elsewhere(job.job_id, job.folder)
        if wrote or listed.states is None or (state is not None and not state.ended):
            adopt.append(job)
        else:
            drop.append(job.job_id)
    return adopt, drop


def match(job: EarlierJob, left: list[tuple[int, RunSpec]]) -> tuple[int, RunSpec] | None:
    """Take out of `left` (plan index, spec) the run an earlier job stands for: the same configuration and
    replicate, else the same configuration; None where no run left is it."""
    for exact in (True, False):
        for k, (index, spec) in enumerate(left):
            if spec.run_key == job.spec.run_key and (not exact or spec.replicate == job.spec.replicate):
                return left.pop(k)
    return None


def take_over(root: Path, plan: list[RunSpec], stored_run_ids: set[str]) -> tuple[list[tuple[int, EarlierJob]],
                                                                                   list[tuple[int, RunSpec]]]:
    """(each earlier job under `root` to wait for, with the place in the plan of the run it stands for; the runs of
    the plan, numbered from 1, that none stands for). Earlier jobs that stand for no run of the plan, or ended
    without a result, are cancelled (Slurm ignores ended ones)."""
    left = list(enumerate(plan, 1))
    earlier = earlier_jobs(root)
    if not earlier:
        return [], left
    found, dropped = to_adopt(earlier, stored_run_ids)
    taken = []
    for job in found:
        matched = match(job, left)
        if matched is None:
            dropped.append(job.job_id)
        else:
            taken.append((matched[0], job))
    queue.cancel(dropped)
    return taken, left
