"""The runner: executes a plan, one worker process per run, and stores each result as it arrives.

The loop over the plan lives here; each part of a run has its own module: the worker process and its files
(worker_process, progress), the workers started ahead and the overlap (ahead), the compilation caches
(compile_cache), a data-parallel run's launch, host lock and record (dataparallel), the runs answered without a
worker (unsupported), the session's --time-limit (limits), and its stop by signal (interrupt).
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.errors import StoreWriteError, Unsupported
from harness.results.record import FAILING_STATUSES, Result, utc_now, write_json_atomic
from harness.results.store import Store
from harness.seam import distributed as dp
from harness.seam.backend import Backend, available_backends
from harness.session import dataparallel
from harness.session.ahead import AheadWorker, WorkersAhead, runs_with_workers
from harness.session.compile_cache import CompileCaches
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.limits import TimeLimit, TimeLimitStop
from harness.session.plan import RunSpec
from harness.session.progress import show_progress
from harness.session.unsupported import decided, static_status
from harness.session.worker_process import (
    RunFiles,
    full_disk,
    start_and_wait,
    timed,
    with_evidence,
    worker_env,
    worker_result,
)
from harness.worker.neighbours import PAUSE_FILE


@dataclass
class SessionOutcome:
    """What a session produced: the records, in plan order, whether it was interrupted, whether its --time-limit
    stopped it before a run (`time_limit`), and whether the store failed (then the records are in the side file
    the error names)."""

    records: list[Result] = field(default_factory=list)
    interrupted: int | None = None
    store_error: StoreWriteError | None = None
    time_limit: TimeLimitStop | None = None

    @property
    def failed(self) -> list[Result]:
        """The records whose status makes `harness run` exit 1."""
        return [r for r in self.records if r.status in FAILING_STATUSES]


class Runner:
    """Runs specs in worker processes and writes each result to the store as soon as it exists."""

    def __init__(
        self,
        store: Store,
        *,
        on_start: Callable | None = None,
        on_result: Callable | None = None,
        on_progress: Callable | None = None,
        memory_limit_bytes: int | None = None,
        cluster: dp.Cluster | None = None,
        overlap: bool | None = None,
        executor=None,
        time_limit: TimeLimit | None = None,
    ):
        self.store = store
        #: --time-limit: no run is started that is expected to end after it (None: no limit)
        self.time_limit = time_limit
        #: where the runs of run() execute: None for worker processes here; else an executor that takes the
        #: whole plan (harness.session.executors: Slurm jobs)
        self.executor = executor
        self.memory_limit_bytes = memory_limit_bytes
        #: this node's place in a several-node data-parallel run (harness run --nnodes ...); one node by default
        self.cluster = cluster or dp.Cluster.from_env()
        self.on_start = on_start or (lambda i, n, spec: None)
        self.on_result = on_result or (lambda i, n, record: None)
        #: on_progress(spec, event): each progress event of the running worker (`phase` first_step,
        #: warmup or block, with its figures; see harness.timing.loop.run_timed), as it arrives.
        self.on_progress = on_progress or (lambda spec, event: None)
        self.backends: dict[str, Backend] = available_backends()
        #: the workers started ahead of their runs (timed runs: the next runs'; probes: the next probe's)
        self.ahead = WorkersAhead(overlap, memory_limit_bytes)
        self.caches = CompileCaches()
        #: the plan's index of the run going on (1-based), which names it in a several-node rendezvous
        self._index = 0
        #: the next runs that start a worker (at most `ahead.depth()`): those whose workers may import ahead
        self._upcoming: list[RunSpec] = []

    def workers_ahead(self):
        """A block within which each capacity probe's worker starts while the previous probe runs (its
        framework's import is then done when the next batch size is known); see WorkersAhead.probing."""
        return self.ahead.probing()

    def static_status(self, spec: RunSpec, *, here: bool = True) -> tuple[str, str] | None:
        """(status, reason) for a run decided without a worker: backend missing or combination unmapped (and, for
        a worker started `here`, a GPU this machine lacks)."""
        return static_status(spec, self.backends, self.cluster, here=here)

    def run(self, plan: list[RunSpec], more: Callable[[list[Result]], list[RunSpec]] | None = None) -> SessionOutcome:
        """Execute every spec in order, storing each record as it arrives; then, while `more(records so far)`
        returns runs (the added rounds of `processes: auto`, harness.session.rounds), those.

        SIGINT/SIGTERM stop the running worker; what finished stays stored and the outcome says
        which signal ended the session. Under a --time-limit (`time_limit`) a run expected to end after it is not
        started, and the outcome says which and why. A result the store cannot take ends the session too: it is
        kept in a side file (Store.add), and the outcome's `store_error` says where.
        """
        if self.executor is not None:
            return _rounds_through(self.executor, self, plan, more)
        outcome = SessionOutcome()
        plan = list(plan)
        with trap_signals():
            try:
                i = 0
                while True:
                    if i == len(plan):
                        added = more(outcome.records) if more is not None else []
                        if not added:
                            break
                        plan += added
                    if self.time_limit is not None:
                        outcome.time_limit = self.time_limit.stop_before(i + 1, plan[i], outcome.records)
                        if outcome.time_limit is not None:
                            break
                    i += 1
                    if self._run_one(i, plan, outcome):
                        break
            except (Interrupted, KeyboardInterrupt) as exc:
                outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
        return outcome

    def _run_one(self, i: int, plan: list[RunSpec], outcome: SessionOutcome) -> bool:
        """Run plan[i - 1], store and report its record; whether the session must stop (the store failed)."""
        spec = plan[i - 1]
        self._upcoming = runs_with_workers(plan[i:], self.ahead.depth(), self.static_status)
        self.on_start(i, len(plan), spec)
        self._index = i
        record = dataparallel.with_scaling_efficiency(self.execute(spec), self.store)
        try:
            if self.cluster.node_rank == 0:  # in a several-node run, node 0 (global rank 0) keeps the record
                self.store.add(record)
        except StoreWriteError as exc:
            outcome.store_error = exc
        outcome.records.append(record)
        self.on_result(i, len(plan), record)
        return outcome.store_error is not None

    def execute(self, spec: RunSpec) -> Result:
        """Execute one spec in a fresh worker process and return its complete record (not stored)."""
        result = Result.planned(spec).updated(started_at=utc_now())
        static = self.static_status(spec)
        if static is not None:
            return decided(result, self.backends.get(spec.backend), static, duration_s=0.0)
        started = time.perf_counter()
        backend = self.backends[spec.backend]
        base_env, cache_state, own_cache = self._run_env(spec, backend)
        probe = spec.probe and dataparallel.replicas_of(spec) == 1
        ahead = self.ahead.take(spec, base_env) if probe or self.ahead.overlapping(spec) else None
        tmpdir = ahead.tmpdir if ahead is not None else tempfile.TemporaryDirectory(prefix="harness-run-")
        try:
            files = RunFiles(Path(tmpdir.name))
            if not probe:
                self.ahead.ready_for(spec, self._upcoming, lambda s: self._run_env(s, self.backends[s.backend])[0],
                                     files.folder / PAUSE_FILE)
            try:
                write_json_atomic(files.spec, spec.to_dict())  # whole: a worker started ahead polls for it
            except OSError as exc:  # a full TMPDIR: this run's record says so, and the session goes on
                reason = full_disk(files.folder) or f"cannot write the run's spec in {files.folder}: {exc}"
                return decided(result, backend, ("failed", reason), duration_s=time.perf_counter() - started)
            env = {**base_env, "HARNESS_PROGRESS_FILE": str(files.progress.path)}
            try:
                launch, commands = dataparallel.launch_commands(spec, backend, files, env, self.cluster, self._index)
            except (Unsupported, ValueError) as exc:
                return decided(result, backend, ("unsupported", str(exc)), duration_s=time.perf_counter() - started)
            result = self._measured(result, spec, files, launch, commands, ahead, base_env)
            result = with_evidence(result, files.log).updated(compile_cache=cache_state)
        finally:
            tmpdir.cleanup()
            if own_cache is not None:
                shutil.rmtree(own_cache, ignore_errors=True)
        return timed(result, started, worker_ran=launch is None)

    def _measured(self, result: Result, spec: RunSpec, files: RunFiles, launch: dp.Launch | None, commands: list,
                  ahead: AheadWorker | None, base_env: dict) -> Result:
        """The run's processes started (or the worker started ahead handed the run), waited for and stopped; the
        record of what they wrote: a plain run's worker's, or the replicas' merged."""
        if launch is not None:
            result = result.updated(distributed=dataparallel.layout(spec, launch, self.cluster))

        def show_lock_event(phase: str, **figures) -> None:  # the runner's own wait, shown as a worker's would be
            show_progress(self.on_progress, spec, {"phase": phase, "t": time.time(), **figures})

        with dataparallel.replicas_lock(spec, launch, self.cluster, show_lock_event) as isolation:
            procs, timed_out, leftovers = start_and_wait(
                files, commands, ahead.proc if ahead is not None else None, spec.timeout_s,
                show=lambda event: show_progress(self.on_progress, spec, event),
                started=lambda: self.ahead.probe_started(spec, base_env))
        if launch is None:
            return worker_result(result, spec, files.result, timed_out, procs[0])
        result = dataparallel.record_of_replicas(result, spec, launch, procs, files, timed_out, leftovers,
                                                 self.cluster.node_rank)
        return result.updated(env=result.env.updated(isolation=isolation))

    def _run_env(self, spec: RunSpec, backend: Backend) -> tuple[dict[str, str], str | None, Path | None]:
        """(environment, compile-cache state, folder to remove after the run) of a run's worker. A worker started
        ahead for the run has this environment too, which is how the run knows it for its own."""
        cache_env, cache_state, own_cache = self.caches.for_run(spec, backend)
        env = worker_env(self.memory_limit_bytes,
                         {**backend.worker_env(spec.options, probe=spec.probe), **cache_env})
        return env, cache_state, own_cache

    def close(self) -> None:
        """Remove what the session's runs left: the compilation caches, a worker started ahead."""
        self.ahead.drop()
        self.caches.close()


def _rounds_through(executor, runner: Runner, plan: list[RunSpec],
                    more: Callable[[list[Result]], list[RunSpec]] | None) -> SessionOutcome:
    """The plan, then each added round, each as one submission to an executor that takes a whole plan."""
    outcome = executor.run_plan(runner, plan)
    while more is not None and not outcome.interrupted and outcome.store_error is None:
        added = more(outcome.records)
        if not added:
            break
        part = executor.run_plan(runner, added)
        outcome.records.extend(part.records)
        outcome.interrupted, outcome.store_error = part.interrupted, part.store_error
    return outcome
