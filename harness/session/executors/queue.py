"""What Slurm says of a session's jobs: one `squeue` call for all of them per poll, however many there are.

A job Slurm no longer lists (it forgets finished jobs after MinJobAge, 300 s by default) is asked of
`sacct` where the cluster keeps accounting; where it does not, the job's own files say how it ended.
squeue asked only of jobs it has forgotten does not answer with an empty list but fails ("Invalid job id
specified"): that is read as "none of them listed", not as a squeue that could not be reached.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

#: States in which a job has ended (squeue's long names).
ENDED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "CANCELLED",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
                   "LOST"})  # harness's own: a job nothing told the end of in time (endings.lost)
#: Seconds one squeue or sacct call may take.
CALL_TIMEOUT_S = 60
#: What squeue says, failing, when it lists none of the jobs it was asked about (all forgotten, or never there).
FORGOTTEN = "Invalid job id specified"


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


@dataclass(frozen=True)
class Listing:
    """One squeue answer: the state of each job it lists (None where squeue could not answer this time), and
    why it could not."""

    states: dict[str, JobState] | None = field(default_factory=dict)
    error: str = ""


def _call(argv: list[str]) -> tuple[list[str] | None, str]:
    """(stdout's lines, or None where the command failed; the first line of what it said on failing)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{argv[0]}: {exc}"
    if done.returncode == 0:
        return done.stdout.splitlines(), ""
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return None, said[0] if said else f"{argv[0]} exited with code {done.returncode}"


def _lines(argv: list[str]) -> list[str] | None:
    return _call(argv)[0]


def listing(lines: list[str] | None, error: str) -> Listing:
    """squeue's answer read: each job's state; none listed where squeue said it knows none of them (FORGOTTEN);
    no answer (states None) where it failed otherwise."""
    if lines is None:
        return Listing({}, "") if FORGOTTEN in error else Listing(None, error)
    out = {}
    for line in lines:
        parts = line.strip().split("|")
        if len(parts) == 4:
            job, state, reason, node = parts
            out[job] = JobState(state.split()[0], "" if reason in ("None", "(null)") else reason, node)
    return Listing(out)


def poll(job_ids: list[str]) -> Listing:
    """What Slurm lists of the jobs, in one squeue call (states None where squeue could not answer this time: ask
    again later). Array tasks are named ARRAY_TASK, as squeue --array names them."""
    if not job_ids:
        return Listing({})
    arrays = sorted({str(j).split("_")[0] for j in job_ids})
    return listing(*_call(["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(arrays)}",
                           "--format=%i|%T|%r|%N"]))


def accounted(job_id: str) -> JobState | None:
    """A job's state as `sacct` keeps it, or None where the cluster keeps no accounting (or none of the job)."""
    return accounting(job_id, _lines(["sacct", "--noheader", "--parsable2", f"--jobs={job_id}",
                                      "--format=JobID,State,NodeList"]))


def accounting(job_id: str, lines: list[str] | None) -> JobState | None:
    """The job's line of sacct's answer (`JobID|State|NodeList`, its steps' lines beside it), or None."""
    for line in lines or []:
        parts = line.split("|")
        if len(parts) == 3 and parts[0] == job_id and parts[1].strip():
            return JobState(parts[1].split()[0], "", parts[2])
    return None


def cancel(job_ids: list[str]) -> None:
    """scancel the jobs (pending and running); Slurm ignores the ones that have ended."""
    if job_ids:
        _lines(["scancel", *sorted(set(job_ids))])
