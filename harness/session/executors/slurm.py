"""`--executor slurm`: a session's runs as Slurm jobs, submitted through submitit, results stored as they arrive.

The submitting `harness run` plans the session as usual, decides on this machine what needs no worker
(a backend not installed, a combination it cannot run), then submits every other run at once: one job
array per kind of job (how many GPUs it needs; at most `array_size` tasks an array), tasks in plan order,
so that interleaved runs start in the order they were planned. Each job runs one worker
(`job.run_worker`) on whole GPUs of its own: a run's `cuda:N` is the job's N-th GPU. The run's spec, its result and its log are JSON and text files in
a folder every node sees (`SlurmSettings.folder`); submitit's own job files sit beside them.

The submitter polls Slurm (one squeue call for the whole session, every `poll_s`), shows each run as
its job starts and its progress as the worker reports it, and stores each result as its job ends
(`endings`: how Slurm ended a job that wrote no result becomes the run's status). Ctrl-C (or
SIGTERM, or SIGHUP: its terminal gone) cancels the session's pending and running jobs; what finished stays
stored, and `--resume` submits only the runs without an ok result. Each run's job id is written beside its
spec (`adopt`), so that a `--resume` after a submitter that died without cancelling them (kill -9) takes
in what its jobs wrote and waits for the ones still queued or running, never running a run twice. The submitter writes the store, not the jobs: the jobs need
no database credentials and no route to the server (none reach their environment, which Slurm keeps on
disk), and a store that fails stops one process, which keeps every result in a side file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.errors import InputError, StoreWriteError
from harness.machine.devices import gpu_index
from harness.results.record import Result, utc_now, write_json_atomic
from harness.results.store import redact
from harness.session.compile_cache import CompileCaches
from harness.session.dataparallel import replicas_of
from harness.session.executors import adopt, queue
from harness.session.executors.endings import (
    LIST_GRACE_S,
    job_record,
    lost,
    told_elsewhere,
    unlisted_end,
)
from harness.session.executors.job import run_worker
from harness.session.executors.settings import SlurmSettings, array_parameters
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.plan import RunSpec
from harness.session.progress import ProgressReader, show_progress
from harness.session.runner import SessionOutcome
from harness.session.worker_process import (
    runner_env,
    worker_env,
)

#: Variables that hold a database password and never reach a job (the jobs write no store).
SECRET_VARIABLES = ("PGPASSWORD",)


@dataclass
class _Job:
    """One submitted run: its place in the plan, its spec, its folder and its Slurm job id."""

    index: int
    spec: RunSpec
    folder: Path
    job_id: str = ""
    submitted_at: float = field(default_factory=time.monotonic)
    #: when Slurm (squeue, sacct) or the job's files last told how it stood, on time.monotonic()
    told_at: float = field(default_factory=time.monotonic)
    started: bool = False
    progress: ProgressReader | None = None
    #: the compile-cache state the submitter gave the run (`compile_cache`), and its own cache folder
    cache_state: str | None = None
    own_cache: Path | None = None


@contextlib.contextmanager
def _hangup_interrupts(handler=None):
    """SIGHUP (the submitter's terminal gone) stops the session as SIGTERM does within the block: Interrupted,
    so that the session's jobs are cancelled and it is marked interrupted; with `handler`, handled that way."""
    def _raise(signum, frame):
        raise Interrupted(signum)

    try:
        previous = signal.signal(signal.SIGHUP, handler if handler is not None else _raise)
    except (AttributeError, ValueError):  # no SIGHUP here, or not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


@contextlib.contextmanager
def credentials_withheld():
    """Within the block, no database password in this process's environment: sbatch hands the submitter's
    environment to the job, and Slurm keeps it on disk with the job. PGPASSWORD and any variable whose value
    holds a URL with a password (HARNESS_STORE=postgresql://user:pw@...) are put back afterwards."""
    held = {k: v for k, v in os.environ.items() if k in SECRET_VARIABLES or redact(v) != v}
    for name in held:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(held)


def sbatch_said(message: str) -> str:
    """sbatch's own error line out of submitit's message (the command, its output), else its last line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = [line for line in lines if "sbatch: error" in line]
    return (said or lines or ["no reason given"])[-1]


def gpus_needed(spec: RunSpec) -> int:
    """Whole GPUs a run's job needs: N+1 for cuda:N (the job's N-th GPU), none on the CPU."""
    index = gpu_index(str(spec.device))
    return 0 if index is None else index + 1


class SlurmExecutor:
    """Runs a plan as Slurm jobs (see the module's docstring); `notice` tells the user what Slurm says."""

    def __init__(self, settings: SlurmSettings, notice: Callable[[str], None] | None = None):
        self.settings = settings
        self.notice = notice or (lambda text: None)
        self._said = ""
        self.caches: CompileCaches | None = None

    # ------------------------------------------------------------------ the session
    def run_plan(self, runner, plan: list[RunSpec]) -> SessionOutcome:
        """Submit the plan, store each result as its job ends; SIGINT, SIGTERM and SIGHUP cancel what has not ended.
        Jobs an earlier submitter of the session left behind are adopted, not submitted again (`adopt`)."""
        outcome = SessionOutcome()
        jobs: list[_Job] = []
        if self.caches is None:  # the session's, on the folder every node sees; the Runner removes them at its end
            self.caches = runner.caches = CompileCaches(self._root(plan) / "caches")
        with trap_signals(), _hangup_interrupts():
            try:
                adopted, left = self._adopt(runner, plan)
                jobs.extend(adopted)
                self._submit(runner, left, len(plan), outcome, jobs)  # into `jobs` as each array goes in
                jobs.sort(key=lambda j: j.index)
                self._collect(runner, jobs, len(plan), outcome)
            except (Interrupted, KeyboardInterrupt) as exc:
                with trap_signals(signal.SIG_IGN), _hangup_interrupts(signal.SIG_IGN):  # a second signal waits
                    queue.cancel([j.job_id for j in jobs if j.job_id])
                outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
        return outcome

    def _root(self, plan: list[RunSpec]) -> Path:
        """The folder of the session's jobs' files."""
        return Path(self.settings.folder).resolve() / (plan[0].session_id if plan else "empty")

    def _adopt(self, runner, plan: list[RunSpec]) -> tuple[list[_Job], list[tuple[int, RunSpec]]]:
        """(the jobs an earlier submitter of this session left that stand for runs of the plan, waited for as if
        submitted now; the runs of the plan, numbered, that none stands for: `adopt.take_over`)."""
        stored = {r.get("run_id") for r in runner.store.records([plan[0].session_id])} if plan else set()
        taken, left = adopt.take_over(self._root(plan), plan, stored)
        then = time.monotonic() - LIST_GRACE_S  # submitted long ago: one Slurm no longer lists has ended
        jobs = [_Job(index, job.spec, job.folder, job.job_id, submitted_at=then, told_at=time.monotonic(),
                     progress=ProgressReader(job.folder / "progress.jsonl"), cache_state=job.compile_cache)
                for index, job in taken]
        if jobs:
            arrays = ", ".join(sorted({j.job_id.split("_")[0] for j in jobs}))
            self.notice(f"slurm: {len(jobs)} run(s) taken over from job array {arrays}, left by an earlier submitter "
                        "of this session; they are not submitted again")
        return jobs, left

    def _finish(self, runner, job: _Job, n: int, record: Result, outcome: SessionOutcome) -> None:
        """Store a record as it arrives and tell the observer."""
        try:
            runner.store.add(record)
        except StoreWriteError as exc:
            outcome.store_error = exc
        outcome.records.append(record)
        runner.on_result(job.index, n, record)

    # ------------------------------------------------------------------ submitting
    def _submit(self, runner, numbered: list[tuple[int, RunSpec]], n: int, outcome: SessionOutcome,
                jobs: list[_Job]) -> None:
        """Decide what needs no worker here; submit the rest, one array per number of GPUs, in plan order
        (`numbered`: each run with its place in the plan of `n`), each submitted job added to `jobs` at once (a
        signal in mid-submission then cancels every array already in)."""
        root = self._root([spec for _, spec in numbered])
        groups: dict[int, list[_Job]] = {}
        for i, spec in numbered:
            decided = decided_here(runner, spec)
            if decided is not None:
                runner.on_start(i, n, spec)
                self._finish(runner, _Job(i, spec, root), n, decided, outcome)
                continue
            folder = root / f"{i:06d}-{spec.run_id}"
            folder.mkdir(parents=True, exist_ok=True)
            groups.setdefault(gpus_needed(spec), []).append(_Job(i, spec, folder))
        size, refused, before = self.settings.array_size, None, len(jobs)
        for gpus, group in groups.items():
            for start in range(0, len(group), size):  # Slurm's MaxArraySize (1001 by default) bounds an array
                part = group[start:start + size]
                if refused is None:
                    refused = self._submit_array(runner, part, gpus, root / "submitit", jobs)
                    if refused is not None:
                        submitted = len(jobs) - before
                        self.notice(refused_notice(refused, sum(map(len, groups.values())) - submitted, submitted))
                if refused is not None:  # recorded, not submitted: --resume submits them again
                    for job in part:
                        self._finish(runner, job, n, not_submitted(runner, job, n, refused), outcome)

    def _submit_array(self, runner, group: list[_Job], gpus: int, folder: Path, jobs: list[_Job]) -> str | None:
        """Write each run's spec and submit the group as one job array (submitit batches it); what sbatch said
        where it refused the array (after submitit's own retries), else None."""
        try:  # an optional dependency (the `cluster` extra), needed only when runs go to Slurm
            import submitit
        except ImportError:
            raise InputError("--executor slurm needs submitit: pip install 'harness[cluster]'",
                             field="--executor") from None
        executor = submitit.SlurmExecutor(folder=str(folder / "%j"), python=sys.executable)
        executor.update_parameters(**array_parameters(self.settings, [j.spec for j in group], gpus))
        submitted = []
        try:
            with credentials_withheld(), executor.batch():
                for job in group:
                    submitted.append(executor.submit(run_worker, *self._worker(runner, job)))
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as exc:
            return sbatch_said(str(exc))
        for job, handle in zip(group, submitted):
            job.job_id = str(handle.job_id)
            job.submitted_at = job.told_at = time.monotonic()
            adopt.note_job(job.folder, job.job_id, job.cache_state)  # for a --resume after this submitter is gone
            jobs.append(job)
        self.notice(f"slurm: {len(group)} run(s) submitted as job array {group and jobs[-1].job_id.split('_')[0]}"
                    f"{f' with {gpus} GPU(s) each' if gpus else ''}")
        return None

    def _worker(self, runner, job: _Job) -> tuple[list[str], dict, str, str | None]:
        """(argv, environment, folder, shared compile-cache folder) of a run's worker: its spec written, the
        environment as the submitter would give a local worker (compilation caches of its own included), less
        what is the same in the job anyway."""
        write_json_atomic(job.folder / "spec.json", job.spec.to_dict())
        backend = runner.backends[job.spec.backend]
        cache_env, job.cache_state, job.own_cache = self.caches.for_run(job.spec, backend)
        env = worker_env(runner.memory_limit_bytes, {**backend.worker_env(job.spec.options, probe=False), **cache_env})
        env["HARNESS_PROGRESS_FILE"] = str(job.folder / "progress.jsonl")
        job.progress = ProgressReader(job.folder / "progress.jsonl")
        delta = {k: v for k, v in env.items() if os.environ.get(k) != v}
        argv = [sys.executable, "-m", "harness.worker", str(job.folder / "spec.json"), str(job.folder / "result.json")]
        shared = self.caches.shared(job.spec) if job.cache_state in ("cold", "warm") else None
        return argv, delta, str(job.folder), str(shared) if shared else None

    # ------------------------------------------------------------------ collecting
    def _collect(self, runner, jobs: list[_Job], n: int, outcome: SessionOutcome) -> None:
        """Poll Slurm until every job has ended; each that starts is shown, each that ends is stored."""
        waiting = {j.job_id: j for j in jobs}
        while waiting:
            listed = queue.poll(list(waiting))
            for job_id, job in list(waiting.items()):
                state = self._state(job, listed)
                if state is None:
                    continue
                self._follow(runner, job, state, n)
                if state.ended:
                    del waiting[job_id]
                    self._finish(runner, job, n, job_record(job.spec, job.folder, job.job_id, state,
                                                            self.settings.time, job.cache_state), outcome)
                    if job.own_cache is not None:
                        shutil.rmtree(job.own_cache, ignore_errors=True)
                if outcome.store_error is not None:  # the store failed: the session stops, as it does locally
                    queue.cancel(list(waiting))
                    return
            if listed.states is not None:
                self._say_pending(listed.states, waiting)
            if waiting:
                time.sleep(self.settings.poll_s)

    def _state(self, job: _Job, listed: queue.Listing) -> queue.JobState | None:
        """How a job stands: as squeue lists it; else, once squeue no longer lists it, as sacct or its own files
        tell; where squeue does not answer, only what sacct or its files tell. None while nothing tells it, until
        nothing has for `lost_after_s`: then lost, with why."""
        now = time.monotonic()
        if listed.states is not None and job.job_id in listed.states:
            job.told_at = now
            return listed.states[job.job_id]
        if listed.states is not None:
            state = unlisted_end(job.job_id, job.folder, job.submitted_at)
        else:
            state = told_elsewhere(job.job_id, job.folder)
        if state is not None:
            job.told_at = now
            return state
        waited = now - job.told_at
        if waited < self.settings.lost_after_s:
            return None
        why = f"squeue: {listed.error}" if listed.states is None else "squeue no longer lists it and sacct " \
            "has no end for it"
        return lost(why, waited)

    def _follow(self, runner, job: _Job, state: queue.JobState, n: int) -> None:
        """Show a job that started, and its worker's progress."""
        if not job.started and (state.state == "RUNNING" or state.ended):
            job.started = True
            runner.on_start(job.index, n, job.spec)
        if job.started and job.progress is not None:
            for event in job.progress.read():
                show_progress(runner.on_progress, job.spec, event)

    def _say_pending(self, states: dict, waiting: dict) -> None:
        """Tell the user why jobs wait, each time the reasons change (a node drained, a partition down...)."""
        reasons = Counter(state.reason for state in (states.get(job_id) for job_id in waiting)
                          if state is not None and state.state == "PENDING" and state.reason)
        said = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        if said != self._said and any(r not in ("Priority", "Resources", "JobArrayTaskLimit") for r in reasons):
            self.notice(f"slurm: job(s) pending: {said}")
        self._said = said


def decided_here(runner, spec: RunSpec) -> Result | None:
    """The record of a run decided on this machine, without a job, or None."""
    static = runner.static_status(spec, here=False)  # the job's node has its own GPUs: its worker says
    if static is None and replicas_of(spec) > 1:
        static = ("unsupported", "--executor slurm runs one worker per job; a data-parallel run (replicas > 1) "
                                 "runs with --executor local (on each node: harness run --nnodes ...)")
    if static is None:
        return None
    return Result.planned(spec).updated(started_at=utc_now(), status=static[0], error=static[1], duration_s=0.0,
                                        env=runner_env())


def not_submitted(runner, job: _Job, n: int, refused: str) -> Result:
    """The `failed` record of a run whose job array sbatch refused."""
    runner.on_start(job.index, n, job.spec)
    return Result.planned(job.spec).updated(
        started_at=utc_now(), status="failed", duration_s=0.0, env=runner_env(),
        error=f"not submitted: sbatch refused its job array ({refused}); harness run --resume submits it again")


def refused_notice(refused: str, unsubmitted: int, submitted: int) -> str:
    """What the submitter says where sbatch refused an array."""
    return (f"slurm: sbatch refused a job array ({refused}): {unsubmitted} run(s) are recorded failed, not "
            f"submitted{f'; the {submitted} submitted go on' if submitted else ''}. --resume submits them again "
            "(where Slurm's job limit refused them, MaxJobCount, which every pending array task counts against, "
            "once the queue has room)")
