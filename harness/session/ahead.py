"""Workers started ahead of their runs (`python -m harness.worker --ahead`), importing their frameworks while
something else goes on, and when a run may have them.

- Timed runs (overlap): the next runs' workers import while this run sets up, and this run's worker pauses them
  (SIGSTOP, harness.worker.neighbours) from its first step to its last measurement; each imports through every
  untimed stretch until its run comes, and then takes the run without importing again.
- Capacity probes: while one probe runs, the next probe's worker starts, so its import (seconds for TensorFlow)
  is done when the next batch size is known; each probe still runs in a process of its own.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from harness.machine import nvml
from harness.machine.devices import gpu_index
from harness.results.record import write_json_atomic
from harness.seam.runspec import RunSpec
from harness.session.dataparallel import replicas_of
from harness.session.worker_process import continue_group, kill_group

#: The fewest CPU cores with which a timed run's set-up may share the host with the next run's import.
OVERLAP_MIN_CORES = 4
#: The most upcoming runs whose workers import ahead at once (one for each OVERLAP_MIN_CORES cores of the host).
#: TensorFlow's import takes 10-15 s and a short run's untimed set-up a few, so one worker ahead is often still
#: importing when its run comes: several, each importing through every set-up until theirs, are ready.
AHEAD_DEPTH = 4


@dataclass
class AheadWorker:
    """A worker started before its run, importing its framework; `key` says which runs it suits."""

    key: tuple
    proc: subprocess.Popen
    tmpdir: tempfile.TemporaryDirectory


def stop_ahead(ahead: AheadWorker) -> None:
    """Stop a worker started ahead and remove its folder."""
    continue_group(ahead.proc)  # a paused process would hold its SIGTERM until the grace period ran out
    kill_group(ahead.proc)
    ahead.tmpdir.cleanup()


def runs_with_workers(upcoming: list[RunSpec], n: int,
                      decided: Callable[[RunSpec], object | None]) -> list[RunSpec]:
    """The first `n` upcoming runs that start a worker: those whose workers may import ahead. Runs decided
    without a worker (`decided(spec)` not None: a mode the framework lacks, a backend not installed) are passed
    over, so they do not cost the runs after them their overlap."""
    found = []
    for spec in upcoming:
        if len(found) == n:
            break
        if decided(spec) is None:
            found.append(spec)
    return found


class WorkersAhead:
    """A session's workers started ahead, oldest first (`pool`): the next runs' (timed runs), or the next probe's.

    `overlap`: whether timed runs have the next runs' workers importing beside them (None: where that is
    harmless, `overlap_harmless`; True/False: always, never). `memory_limit_bytes`: the session's
    --memory-limit, which decides whether a probe may have one beside it (`probe_harmless`)."""

    def __init__(self, overlap: bool | None = None, memory_limit_bytes: int | None = None):
        self.overlap = overlap
        self.memory_limit_bytes = memory_limit_bytes
        #: capacity probes: while one probe runs, the next one's worker starts and imports its framework
        self.for_probes = False
        self.pool: list[AheadWorker] = []

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Within this block, each capacity probe's worker starts while the previous probe runs. The worker left
        unused at the end is stopped. Only where the import's host memory cannot change a probe's answer."""
        self.for_probes = True
        try:
            yield
        finally:
            self.for_probes = False
            self.drop()

    def drop(self) -> None:
        """Stop the workers started ahead, if any, and remove their folders."""
        pool, self.pool = self.pool, []
        for ahead in pool:
            stop_ahead(ahead)

    @staticmethod
    def depth() -> int:
        """How many upcoming runs' workers import ahead at once: one per OVERLAP_MIN_CORES cores, 1 to AHEAD_DEPTH."""
        return max(1, min(AHEAD_DEPTH, (os.cpu_count() or 1) // OVERLAP_MIN_CORES))

    @staticmethod
    def key(spec: RunSpec, env: dict) -> tuple:
        """Which workers started ahead suit a run: those of its backend, with its environment."""
        return spec.backend, tuple(sorted(env.items()))

    def start(self, spec: RunSpec, env: dict) -> None:
        """Start the worker of a run like `spec` (same backend, same environment) before that run exists."""
        tmpdir = tempfile.TemporaryDirectory(prefix="harness-run-")
        ahead_env = {**env, "HARNESS_PROGRESS_FILE": str(Path(tmpdir.name, "progress.jsonl"))}
        with open(Path(tmpdir.name, "worker.log"), "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.worker", "--ahead", spec.backend, tmpdir.name, str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=ahead_env,
                start_new_session=True)
        self.pool.append(AheadWorker(self.key(spec, env), proc, tmpdir))

    def take(self, spec: RunSpec, env: dict) -> AheadWorker | None:
        """The oldest worker started ahead that suits this run (same backend, same environment) and still waits
        for one, taken out of the pool; None where there is none. One that has left is stopped on the way."""
        key = self.key(spec, env)
        for ahead in list(self.pool):
            if ahead.key != key:
                continue
            self.pool.remove(ahead)
            if ahead.proc.poll() is not None:
                stop_ahead(ahead)
                continue
            continue_group(ahead.proc)  # a worker that died while timed may have left it paused
            return ahead
        return None

    def probe_started(self, spec: RunSpec, env: dict) -> None:
        """A probe's processes are running: one worker imports ahead for the next probe, which is like this one
        (same backend, same environment), where probes have them and it leaves the probe's answer alone; it is
        started unless there is one, and any other is stopped."""
        probe = spec.probe and replicas_of(spec) == 1
        if not (probe and self.for_probes and self.probe_harmless(spec)):
            return
        key = self.key(spec, env)
        for other in [a for a in self.pool if a.key != key]:
            self.pool.remove(other)
            stop_ahead(other)
        if not self.pool:
            self.start(spec, env)

    def probe_harmless(self, spec: RunSpec) -> bool:
        """Whether a worker importing beside a probe leaves the probe's answer alone: it takes host memory (about
        half a GiB), which bounds a probe only on the CPU without --memory-limit (each worker has its own limit)."""
        return gpu_index(str(spec.device)) is not None or bool(self.memory_limit_bytes)

    @staticmethod
    def overlap_harmless(spec: RunSpec) -> bool:
        """Whether a timed run may have the next runs' workers importing beside it: a plain run (one process) on a
        GPU of a host with cores to spare. The workers ahead are paused from the run's first step to its last
        measurement (harness.worker.neighbours), so they share only the run's own untimed set-up; none opens
        a device before its own run, so they hold no GPU memory. On the CPU the import would take the cores the
        run's own set-up uses, and a small host's load average would call the machine busy."""
        if replicas_of(spec) != 1:
            return False
        device = str(spec.device)
        on_gpu = gpu_index(device) is not None or (device == "auto" and bool(nvml.gpus()))
        return on_gpu and (os.cpu_count() or 1) >= OVERLAP_MIN_CORES

    def overlapping(self, spec: RunSpec) -> bool:
        """Whether this timed run overlaps with the next ones' imports (`overlap`, else `overlap_harmless`)."""
        if spec.probe:
            return False
        return self.overlap if self.overlap is not None else self.overlap_harmless(spec)

    def ready_for(self, spec: RunSpec, upcoming: list[RunSpec], env_of: Callable[[RunSpec], dict],
                  pause_file: Path) -> None:
        """See that each of the runs after `spec` (`upcoming`: those that start a worker, so their backends are
        registered and installed; `env_of`: a run's worker environment) has a worker importing ahead, in run
        order, starting those it lacks and stopping those no upcoming run will take; then name them all in
        `spec`'s pause file, so that its worker pauses them while it is timed."""
        if not self.overlapping(spec):
            self.drop()
            return
        wanted = []
        for following in upcoming:
            if not self.overlapping(following):
                break  # a run that is not overlapped starts its own worker, and so does every run after it here
            wanted.append((following, env_of(following)))
        keep, missing = list(self.pool), []
        for following, env in wanted:
            have = next((a for a in keep if a.key == self.key(following, env)), None)
            if have is not None:
                keep.remove(have)
            else:
                missing.append((following, env))
        for surplus in keep:  # started for runs that no longer come next
            self.pool.remove(surplus)
            stop_ahead(surplus)
        for ahead in self.pool:
            continue_group(ahead.proc)  # a run whose worker died while timed may have left them paused
        for following, env in missing:
            self.start(following, env)
        if self.pool:
            write_json_atomic(pause_file, [a.proc.pid for a in self.pool])
