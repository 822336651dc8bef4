"""What Slurm says of a session's jobs: one `squeue` call for all of them per poll, however many there are.

A job Slurm no longer lists (it forgets finished jobs after MinJobAge, 300 s by default) is asked of
`sacct` where the cluster keeps accounting; where it does not, the job's own files say how it ended.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

#: States in which a job has ended (squeue's long names).
ENDED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "CANCELLED",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
#: Seconds one squeue or sacct call may take.
CALL_TIMEOUT_S = 60


@dataclass(frozen=True)
class JobState:
    """A job as Slurm reports it: its state (RUNNING, TIMEOUT...), the reason Slurm gives, and its node."""

    state: str
    reason: str = ""
    node: str = ""

    @property
    def ended(self) -> bool:
        """Whether the job has ended (in any way)."""
        return self.state in ENDED


def _lines(argv: list[str]) -> list[str] | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.splitlines() if done.returncode == 0 else None


def poll(job_ids: list[str]) -> dict[str, JobState] | None:
    """The state of each job Slurm still lists (None where squeue cannot be reached this time: ask again later).
    Array tasks are named ARRAY_TASK, as squeue --array names them."""
    if not job_ids:
        return {}
    arrays = sorted({str(j).split("_")[0] for j in job_ids})
    lines = _lines(["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(arrays)}",
                    "--format=%i|%T|%r|%N"])
    if lines is None:
        return None
    out = {}
    for line in lines:
        parts = line.strip().split("|")
        if len(parts) == 4:
            job, state, reason, node = parts
            out[job] = JobState(state.split()[0], "" if reason in ("None", "(null)") else reason, node)
    return out


def accounted(job_id: str) -> JobState | None:
    """A job's end as `sacct` keeps it, or None where the cluster keeps no accounting."""
    lines = _lines(["sacct", "--noheader", "--parsable2", f"--jobs={job_id}", "--format=JobID,State,NodeList"])
    for line in lines or []:
        parts = line.split("|")
        if len(parts) == 3 and parts[0] == job_id:
            return JobState(parts[1].split()[0], "", parts[2])
    return None


def cancel(job_ids: list[str]) -> None:
    """scancel the jobs (pending and running); Slurm ignores the ones that have ended."""
    if job_ids:
        _lines(["scancel", *sorted(set(job_ids))])
