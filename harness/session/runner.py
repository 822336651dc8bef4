"""The runner: executes a plan, one worker process per run, and stores each result as it arrives.

A worker that raises, crashes, exits hard or outlives its timeout becomes that run's status; the
session goes on. The parent blocks in wait() (no busy-waiting) so it takes no core from the run: in
slices of PROGRESS_POLL_S, between which it reads the progress events the worker appended to
$HARNESS_PROGRESS_FILE (harness.worker.execute.progress_writer) and hands each to `on_progress`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from harness.errors import StoreWriteError, Unsupported
from harness.machine import env as env_mod
from harness.machine import nvml
from harness.machine.devices import gpu_index
from harness.machine.presence import MISSING_DEVICE, missing_device_reason
from harness.results.record import FAILING_STATUSES, Result, utc_now, write_json_atomic
from harness.results.store import Store
from harness.seam import distributed as dp
from harness.seam.backend import available_backends
from harness.session.dataparallel import merge, read_rank_results, scaling_efficiency
from harness.session.plan import RunSpec, one_replica_key
from harness.timing.stats import median
from harness.worker.hostlock import HELD_VARIABLE, timing_lock
from harness.worker.neighbours import PAUSE_FILE
from harness.workloads import WORKLOADS

#: Seconds a worker gets to exit after SIGTERM before SIGKILL.
TERM_GRACE_S = 5.0
#: The fewest CPU cores with which a timed run's set-up may share the host with the next run's import.
OVERLAP_MIN_CORES = 4
#: The most upcoming runs whose workers import ahead at once (one for each OVERLAP_MIN_CORES cores of the host).
#: TensorFlow's import takes 10-15 s and a short run's untimed set-up a few, so one worker ahead is often still
#: importing when its run comes: several, each importing through every set-up until theirs, are ready.
AHEAD_DEPTH = 4
LOG_TAIL_CHARS = 3000
#: Seconds the runner blocks in wait() between two reads of a worker's progress file.
PROGRESS_POLL_S = 0.5


#: How an `unsupported` record says that the Python it ran in lacked the backend, not that the backend cannot
#: take the configuration (see answer_holds).
NOT_REGISTERED = "no backend named"
NOT_INSTALLED = "is not installed in this Python"


def answer_holds(error: str) -> bool:
    """Whether an `unsupported` record's reason is the backend's answer about its configuration, which holds
    wherever the session goes on, and not this machine's or this Python's lack (no such backend registered,
    its framework not installed, the GPU not there): `--resume` takes the first kind as given and runs the
    second kind again (the framework may be installed since, the GPU there)."""
    return not any(marker in error for marker in (NOT_REGISTERED, NOT_INSTALLED, MISSING_DEVICE))


class ProgressReader:
    """New progress events of one worker: whole JSON lines appended to a file since the last read.

    A line the worker is still writing is left for the next read; a line that is not a JSON object
    is skipped (progress is a courtesy: it never fails a run).
    """

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0

    def read(self) -> list[dict]:
        """The events appended since the last read."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        events = []
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("phase"), str):
                events.append(event)
        return events


class LockWait:
    """How long the running worker has waited for the host's timing lock (its `host_lock` progress events,
    harness.worker.hostlock): that time is another session's, so it does not count against the run's timeout."""

    def __init__(self):
        self.waited_s = 0.0
        self._since: float | None = None

    def note(self, event: dict) -> None:
        """Take in one progress event (only `host_lock` ones count)."""
        if event.get("phase") != "host_lock":
            return
        if event.get("waiting"):
            self._since = time.monotonic()
        elif self._since is not None:
            self.waited_s += time.monotonic() - self._since
            self._since = None

    def seconds(self) -> float:
        """Seconds waited so far, the wait still going on included."""
        return self.waited_s + (time.monotonic() - self._since if self._since is not None else 0.0)


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived during a session."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def worker_env(memory_limit_bytes: int | None = None, framework_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: the user's, plus what its backend says the framework must read at import."""
    env = dict(os.environ)
    if memory_limit_bytes:
        env["HARNESS_MEMORY_LIMIT_BYTES"] = str(int(memory_limit_bytes))
    # NVML and CUDA number GPUs alike only in PCI bus order
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    for name, value in (framework_env or {}).items():
        env[name] = value
    env["PYTHONUNBUFFERED"] = "1"
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


@dataclass
class _Ahead:
    """A worker started before its run (`python -m harness.worker --ahead`), importing its framework."""

    key: tuple
    proc: subprocess.Popen
    tmpdir: tempfile.TemporaryDirectory


def _continue(proc: subprocess.Popen) -> None:
    """Let a paused process group go on (SIGCONT); nothing if it has left."""
    try:
        os.killpg(proc.pid, signal.SIGCONT)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_ahead(ahead: _Ahead) -> None:
    """Stop a worker started ahead and remove its folder."""
    _continue(ahead.proc)  # a paused process would hold its SIGTERM until the grace period ran out
    _kill_group(ahead.proc)
    ahead.tmpdir.cleanup()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the worker's process group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL_CHARS:].strip()


def _died(returncode: int) -> str:
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        hint = " (the OS out-of-memory killer sends SIGKILL)" if -returncode == signal.SIGKILL else ""
        return f"worker killed by signal {name}{hint} before writing a result"
    return f"worker exited with code {returncode} before writing a result"


def runner_env() -> dict:
    """The environment as the runner sees it, for a record whose worker wrote none (a timeout, a
    worker killed or dead before its result, a run decided without a worker): same machine, same
    Python; the framework's own part is unknown."""

    try:
        return {**env_mod.capture(), "framework": {}, "captured_by": "runner"}
    except Exception as exc:  # noqa: BLE001 - a record is never lost for want of its environment
        return {"captured_by": "runner", "capture_error": f"{type(exc).__name__}: {exc}"}


@dataclass(frozen=True)
class _RunFiles:
    """The files between the runner and one run's worker, in the run's own folder."""

    folder: Path

    @property
    def spec(self) -> Path:
        """The run's spec, written by the runner before the worker reads it."""
        return self.folder / "spec.json"

    @property
    def result(self) -> Path:
        """The worker's result (RESULT.rank<r> beside it for each replica of a data-parallel run)."""
        return self.folder / "result.json"

    @property
    def log(self) -> Path:
        """The worker's standard output and error."""
        return self.folder / "worker.log"

    @functools.cached_property
    def progress(self) -> "ProgressReader":
        """The reader of the worker's progress events."""
        return ProgressReader(self.folder / "progress.jsonl")


def read_worker_result(path: Path) -> dict | None:
    """The record fields a worker wrote to its result file (written atomically: whole if there at all), or None."""
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _worker_result(result: Result, spec: RunSpec, path: Path, timed_out: bool, proc: subprocess.Popen) -> Result:
    """The record of a plain run once its worker is gone: what it wrote, or how it ended without writing."""
    written = read_worker_result(path)
    if written is not None:
        result = result.merged(written)
        if timed_out:  # measured and written, then stuck on its way out: keep what it measured
            result = result.updated(warnings=[*(result.warnings or []), (
                f"the worker wrote its result but had not exited after {spec.timeout_s:g} s; "
                "it was stopped and its result kept")])
        return result
    if timed_out:
        return result.updated(status="timeout", error=f"no result within {spec.timeout_s:g} s (measure.timeout_s / "
                                                      "--timeout); worker stopped")
    return result.updated(status="failed", error=_died(proc.returncode))


def _with_evidence(result: Result, log_path: Path) -> Result:
    """The record with the runner's environment where the worker wrote none and, unless ok, the log's tail."""
    if not result.env:
        result = result.updated(env=runner_env())
    if result.status != "ok":
        tail = _tail(log_path)
        if tail:
            result = result.merged({"log_tail": tail})
    return result


def _timed(result: Result, started: float, *, worker_ran: bool) -> Result:
    """The record's duration_s from the runner's clock; with the worker's own duration, the rest of it as the
    `process` phase (the worker's start, imports and exit, and the runner's reading of its result)."""
    worker_s = result.duration_s if worker_ran else None
    duration_s = time.perf_counter() - started
    if worker_s is not None and result.phases_s:
        return result.updated(duration_s=duration_s,
                              phases_s={**result.phases_s, "process": round(duration_s - worker_s, 3)})
    return result.updated(duration_s=duration_s)


@dataclass(frozen=True)
class TimeLimitStop:
    """Where a session's --time-limit stopped it: before run `index` (1-based) of the plan, `spec`, which was
    expected to take `expected_s` (on `basis`: earlier runs) with `left_s` of the limit left."""

    limit_s: float
    index: int
    spec: RunSpec
    expected_s: float | None
    basis: str
    left_s: float


@dataclass
class TimeLimit:
    """A session's --time-limit: a run starts only while the time it is expected to take fits in what is left of
    the limit, so that no run is cut off by whatever ends the session's time (a job's wall time, a machine's
    lease). `expected(spec, records so far)` gives (seconds, basis) or None: a run with nothing to go by starts
    while any time is left. The limit counts from `start` on `clock`."""

    seconds: float
    expected: Callable[[RunSpec, list[Result]], tuple[float, str] | None]
    clock: Callable[[], float] = time.monotonic
    start: float | None = None

    def __post_init__(self):
        if self.start is None:
            self.start = self.clock()

    def stop_before(self, index: int, spec: RunSpec, records: list[Result]) -> TimeLimitStop | None:
        """Why run `index` (`spec`) must not start, or None where it may."""
        left = self.start + self.seconds - self.clock()
        if left <= 0:
            return TimeLimitStop(self.seconds, index, spec, None, "no time left", 0.0)
        guess = self.expected(spec, records)
        if guess is not None and guess[0] > left:
            return TimeLimitStop(self.seconds, index, spec, guess[0], guess[1], left)
        return None


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
        self._index = 0
        self.on_start = on_start or (lambda i, n, spec: None)
        self.on_result = on_result or (lambda i, n, record: None)
        #: on_progress(spec, event): each progress event of the running worker (`phase` first_step,
        #: warmup or block, with its figures; see harness.timing.loop.run_timed), as it arrives.
        self.on_progress = on_progress or (lambda spec, event: None)
        self._backends = available_backends()
        #: capacity probes: while one probe runs, the next one's worker starts and imports its framework
        self._ahead_wanted = False
        #: workers started ahead, oldest first: the next runs' (timed runs), or the next probe's
        self._pool: list[_Ahead] = []
        #: the session's compilation caches (harness-cache-*), made at the first run that needs one
        self._cache_root: str | None = None
        #: timed runs: the next runs' workers import while this one sets up, and are paused while it is timed
        #: (None: where that is harmless, `_overlap_harmless`; True/False: always, never)
        self.overlap = overlap
        #: the next runs that start a worker (at most `ahead_depth()`): those whose workers may import ahead
        self._upcoming: list[RunSpec] = []
        self._lock_wait = LockWait()

    @contextlib.contextmanager
    def workers_ahead(self):
        """Within this block, each capacity probe's worker starts while the previous probe runs (its
        framework's import, seconds for TensorFlow, is then done when the next batch size is known); each
        probe still runs in a process of its own. The worker left unused at the end is stopped. Only where
        the import's host memory cannot change a probe's answer (`_ahead_harmless`)."""
        self._ahead_wanted = True
        try:
            yield self
        finally:
            self._ahead_wanted = False
            self.drop_ahead()

    def drop_ahead(self) -> None:
        """Stop the workers started ahead, if any, and remove their folders."""
        pool, self._pool = self._pool, []
        for ahead in pool:
            _stop_ahead(ahead)

    @staticmethod
    def ahead_depth() -> int:
        """How many upcoming runs' workers import ahead at once: one per OVERLAP_MIN_CORES cores, 1 to AHEAD_DEPTH."""
        return max(1, min(AHEAD_DEPTH, (os.cpu_count() or 1) // OVERLAP_MIN_CORES))

    def _ahead_harmless(self, spec: RunSpec) -> bool:
        """Whether a worker importing beside a probe leaves the probe's answer alone: it takes host memory (about
        half a GiB), which bounds a probe only on the CPU without --memory-limit (each worker has its own limit)."""
        return gpu_index(str(spec.device)) is not None or bool(self.memory_limit_bytes)

    @staticmethod
    def _ahead_key(spec: RunSpec, env: dict) -> tuple:
        return spec.backend, tuple(sorted(env.items()))

    def _start_ahead(self, spec: RunSpec, env: dict) -> None:
        """Start the worker of a run like `spec` (same backend, same environment) before that run exists."""
        tmpdir = tempfile.TemporaryDirectory(prefix="harness-run-")
        ahead_env = {**env, "HARNESS_PROGRESS_FILE": str(Path(tmpdir.name, "progress.jsonl"))}
        with open(Path(tmpdir.name, "worker.log"), "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.worker", "--ahead", spec.backend, tmpdir.name, str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=ahead_env,
                start_new_session=True)
        self._pool.append(_Ahead(self._ahead_key(spec, env), proc, tmpdir))

    def _ahead_for_probe(self, spec: RunSpec, env: dict) -> None:
        """One worker importing ahead for the next probe, which is like this one (same backend, same environment):
        started unless there is one; any other is stopped."""
        key = self._ahead_key(spec, env)
        for other in [a for a in self._pool if a.key != key]:
            self._pool.remove(other)
            _stop_ahead(other)
        if not self._pool:
            self._start_ahead(spec, env)

    def _take_ahead(self, spec: RunSpec, env: dict) -> _Ahead | None:
        """The oldest worker started ahead that suits this run (same backend, same environment) and still waits
        for one, taken out of the pool; None where there is none. One that has left is stopped on the way."""
        key = self._ahead_key(spec, env)
        for ahead in list(self._pool):
            if ahead.key != key:
                continue
            self._pool.remove(ahead)
            if ahead.proc.poll() is not None:
                _stop_ahead(ahead)
                continue
            _continue(ahead.proc)  # a worker that died while timed may have left it paused
            return ahead
        return None

    def _overlap_harmless(self, spec: RunSpec) -> bool:
        """Whether a timed run may have the next runs' workers importing beside it: a plain run (one process) on a
        GPU of a host with cores to spare. The workers ahead are paused from the run's first step to its last
        measurement (harness.worker.neighbours), so they share only the run's own untimed set-up; none opens
        a device before its own run, so they hold no GPU memory. On the CPU the import would take the cores the
        run's own set-up uses, and a small host's load average would call the machine busy."""
        if self._replicas(spec) != 1:
            return False
        device = str(spec.device)
        on_gpu = gpu_index(device) is not None or (device == "auto" and bool(nvml.gpus()))
        return on_gpu and (os.cpu_count() or 1) >= OVERLAP_MIN_CORES

    def _overlapping(self, spec: RunSpec) -> bool:
        """Whether this timed run overlaps with the next ones' imports (`overlap`, else `_overlap_harmless`)."""
        if spec.measure.get("probe"):
            return False
        return self.overlap if self.overlap is not None else self._overlap_harmless(spec)

    def _start_next_ahead(self, spec: RunSpec, files: "_RunFiles") -> None:
        """See that each of the next runs (`_upcoming`: those that start a worker, so their backends are
        registered and installed) has a worker importing ahead, in run order, starting those it lacks and stopping
        those no upcoming run will take; then name them all in this run's pause file, so that this run's worker
        pauses them while it is timed. Each imports through every untimed stretch until its run comes."""
        if not self._overlapping(spec):
            self.drop_ahead()
            return
        wanted = []
        for following in self._upcoming:
            if not self._overlapping(following):
                break  # a run that is not overlapped starts its own worker, and so does every run after it here
            env, _, _ = self._run_env(following, self._backends[following.backend])
            wanted.append((following, env))
        keep, missing = list(self._pool), []
        for following, env in wanted:
            have = next((a for a in keep if a.key == self._ahead_key(following, env)), None)
            if have is not None:
                keep.remove(have)
            else:
                missing.append((following, env))
        for surplus in keep:  # started for runs that no longer come next
            self._pool.remove(surplus)
            _stop_ahead(surplus)
        for ahead in self._pool:
            _continue(ahead.proc)  # a run whose worker died while timed may have left them paused
        for following, env in missing:
            self._start_ahead(following, env)
        if self._pool:
            write_json_atomic(files.folder / PAUSE_FILE, [a.proc.pid for a in self._pool])

    def static_status(self, spec: RunSpec) -> tuple[str, str] | None:
        """(status, reason) for a run decided without a worker: backend missing or combination unmapped."""
        backend = self._backends.get(spec.backend)
        if backend is None:
            return "unsupported", f"{NOT_REGISTERED} {spec.backend!r} is registered"
        if not backend.installed():
            hint = f" ({backend.install_hint})" if backend.install_hint else ""
            return "unsupported", f"{spec.backend} {NOT_INSTALLED}{hint}"
        reason = (backend.unsupported_reason(spec.workload, spec.params, spec.device, spec.options)
                  or missing_device_reason(spec.device))  # a GPU that is not there: no worker to start
        if reason:
            return "unsupported", reason
        replicas = self._replicas(spec)
        if replicas > 1 and replicas % self.cluster.nnodes:
            return "unsupported", (f"replicas={replicas} cannot be shared out evenly over --nnodes {self.cluster.nnodes}: "
                                   "every node runs replicas / nnodes of them")
        if replicas == 1 and self.cluster.multi_node:
            return "unsupported", f"replicas=1 runs on one node; --nnodes {self.cluster.nnodes} is for replicas > 1"
        return None

    @staticmethod
    def _replicas(spec: RunSpec) -> int:
        workload = WORKLOADS.get(spec.workload)
        return workload.replicas(spec.params) if workload else 1

    def execute(self, spec: RunSpec) -> Result:
        """Execute one spec in a fresh worker process and return its complete record (not stored)."""
        result = Result.planned(spec).updated(started_at=utc_now())
        static = self.static_status(spec)
        if static is not None:
            return self._decided(result, backend=self._backends.get(spec.backend), status=static, duration_s=0.0)
        started = time.perf_counter()
        backend = self._backends[spec.backend]
        base_env, cache_state, own_cache = self._run_env(spec, backend)
        probe = bool(spec.measure.get("probe")) and self._replicas(spec) == 1
        ahead = self._take_ahead(spec, base_env) if probe or self._overlapping(spec) else None
        tmpdir = ahead.tmpdir if ahead is not None else tempfile.TemporaryDirectory(prefix="harness-run-")
        try:
            files = _RunFiles(Path(tmpdir.name))
            if not probe:
                self._start_next_ahead(spec, files)
            write_json_atomic(files.spec, spec.to_dict())  # whole: a worker started ahead polls for it
            env = {**base_env, "HARNESS_PROGRESS_FILE": str(files.progress.path)}
            try:
                launch, commands = self._commands(spec, backend, files, env)
            except (Unsupported, ValueError) as exc:
                return self._decided(result, backend=backend, status=("unsupported", str(exc)),
                                     duration_s=time.perf_counter() - started)
            if launch is not None:
                result = result.updated(distributed=self._layout(spec, launch))
            with self._replicas_lock(spec, launch) as isolation:
                procs, timed_out, leftovers = self._start_and_wait(spec, files, commands, ahead, base_env)
            if launch is not None:
                result = self._merge_replicas(result, spec, launch, procs, files, timed_out, leftovers)
                result = result.updated(env={**(result.env or {}), "isolation": isolation})
            else:
                result = _worker_result(result, spec, files.result, timed_out, procs[0])
            result = _with_evidence(result, files.log).updated(compile_cache=cache_state)
        finally:
            tmpdir.cleanup()
            if own_cache is not None:
                shutil.rmtree(own_cache, ignore_errors=True)
        return _timed(result, started, worker_ran=launch is None)

    def _run_env(self, spec: RunSpec, backend) -> tuple[dict[str, str], str | None, Path | None]:
        """(environment, compile-cache state, folder to remove after the run) of a run's worker. A worker started
        ahead for the run has this environment too, which is how the run knows it for its own."""
        cache_env, cache_state, own_cache = self._compile_cache(spec, backend)
        env = worker_env(self.memory_limit_bytes,
                         {**backend.worker_env(spec.options, probe=bool(spec.measure.get("probe"))), **cache_env})
        return env, cache_state, own_cache

    def _compile_cache(self, spec: RunSpec, backend) -> tuple[dict[str, str], str | None, Path | None]:
        """(environment, state, folder to remove after the run) of a run's compilation caches, in a folder the
        session owns (close() removes it): a new empty one per process (`compile_cache: cold`), or one per
        configuration (`warm`: cold for its first process, warm once a process has filled it). The CUDA
        driver's cache of kernels it compiled from PTX (a build without machine code for the GPU: TensorFlow
        2.21 on compute capability 9.0) is the process's own in either mode: otherwise it is one folder per user
        (~/.nv/ComputeCache), kept across processes and sessions, and a "cold" first step would reuse the
        kernels an earlier process compiled. A capacity probe keeps the framework's and the driver's defaults."""
        if spec.measure.get("probe"):
            return {}, None, None
        if self._cache_root is None:
            self._cache_root = tempfile.mkdtemp(prefix="harness-cache-")
        own = Path(self._cache_root, f"run-{spec.run_id}")  # this process's, removed after its run
        own.mkdir(exist_ok=True)
        driver = {"CUDA_CACHE_PATH": str(own / "cuda-driver")}
        warm = spec.measure.get("compile_cache") == "warm"
        folder = Path(self._cache_root, f"config-{hashlib.sha256(spec.run_key.encode()).hexdigest()[:16]}") \
            if warm else own
        env = backend.compile_cache_env(str(folder))
        if not env:
            return driver, "none", own
        state = "warm" if warm and folder.is_dir() and any(folder.iterdir()) else "cold"
        folder.mkdir(exist_ok=True)
        return {**env, **driver}, state, own

    def close(self) -> None:
        """Remove what the session's runs left: the compilation caches, a worker started ahead."""
        self.drop_ahead()
        root, self._cache_root = self._cache_root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def _decided(self, result: Result, *, backend, status: tuple[str, str], duration_s: float) -> Result:
        """The record of a run decided without a measurement: its status and reason, the runner's environment."""
        return result.updated(status=status[0], error=status[1], duration_s=duration_s,
                              framework_version=backend.framework_version() if backend else None, env=runner_env())

    def _commands(self, spec: RunSpec, backend, files: "_RunFiles", env: dict) -> tuple:
        """(launch, [(argv, environment)]): one worker for a plain run; the backend's launch of every local replica
        for a data-parallel one (Unsupported or ValueError where it cannot start them)."""
        worker = [sys.executable, "-m", "harness.worker", str(files.spec), str(files.result)]
        if self._replicas(spec) == 1:
            return None, [(worker, env)]
        launch = backend.launch(spec, worker, self._cluster_for_run(spec))
        return launch, [(p.argv, {**env, **p.env, "HARNESS_REPLICA": "1", HELD_VARIABLE: "1"}) for p in launch.processes]

    @contextlib.contextmanager
    def _replicas_lock(self, spec: RunSpec, launch: dp.Launch | None) -> Iterator[dict | None]:
        """The host's timing lock for a data-parallel run, held here from its launch to its last replica's exit
        (its replicas do not take it: HELD_VARIABLE): ranks that waited for the lock inside a collective could
        outlast the collective's timeout. Yields the record's `env.isolation`; None for a plain run (its worker
        takes the lock). Not taken over several nodes: each node's lock is its own, and two such sessions each
        holding one node's lock would wait for each other for ever; the scheduler keeps them apart."""
        if launch is None:
            yield None
            return
        if self.cluster.multi_node:
            yield {"mode": "not_taken", "reason": "a run over several nodes: keep such sessions apart with the "
                                                  "scheduler (Slurm --exclusive)"}
            return
        who = {"session": spec.session_id, "run": f"{spec.backend} {spec.workload} on {spec.device} (data-parallel)"}
        show = functools.partial(self._show_lock_event, spec)
        with timing_lock(bool(spec.measure.get("share_host")), who, show) as isolation:
            yield isolation

    def _show_lock_event(self, spec: RunSpec, phase: str, **figures) -> None:
        """A `host_lock` event of the runner's own wait, shown as a worker's would be."""
        try:
            self.on_progress(spec, {"phase": phase, "t": time.time(), **figures})
        except Interrupted:
            raise
        except Exception:  # noqa: BLE001 - a display that fails must not fail the run
            pass

    def _layout(self, spec: RunSpec, launch: dp.Launch) -> dict:
        """A data-parallel record's `distributed` before its replicas run: the launcher and the layout."""
        replicas = self._replicas(spec)
        return {"launcher": launch.api, "nnodes": self.cluster.nnodes, "node_rank": self.cluster.node_rank,
                "world_size": replicas, "global_batch": int(spec.params.get("batch_size") or 0) * replicas}

    def _start_and_wait(self, spec: RunSpec, files: "_RunFiles", commands: list, ahead: _Ahead | None,
                        base_env: dict) -> tuple[list[subprocess.Popen], bool, list[int]]:
        """Start the run's processes (or hand the run to the worker started ahead), wait for them and stop what is
        left: (processes, whether the timeout passed, pids of registered replicas killed after the launch ended)."""
        procs: list[subprocess.Popen] = []
        with open(files.log, "ab") as log:
            try:
                if ahead is not None:  # its framework already imported: the spec handed it the run
                    procs.append(ahead.proc)
                    commands = []
                for argv, proc_env in commands:
                    procs.append(subprocess.Popen(
                        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=proc_env,
                        start_new_session=True,  # the terminal's Ctrl-C reaches the runner, which decides
                    ))
                probe = bool(spec.measure.get("probe")) and self._replicas(spec) == 1
                if probe and self._ahead_wanted and self._ahead_harmless(spec):
                    self._ahead_for_probe(spec, base_env)  # the next probe's worker imports while this one runs
                timed_out = not self._wait_all(procs, spec, files.progress)
            except BaseException:
                for proc in procs:
                    _kill_group(proc)
                dp.kill_registered(files.result)
                raise
            for proc in procs:
                if timed_out or proc.poll() is None:
                    _kill_group(proc)
            # a launcher may start its replicas in sessions of their own: end any that outlived it
            leftovers = dp.kill_registered(files.result)
        return procs, timed_out, leftovers

    def _cluster_for_run(self, spec: RunSpec) -> dp.Cluster:
        """The cluster with a rendezvous id of this run: every node runs the same plan in the same order,
        so (run_key, replicate, index in the plan) names the same run on each."""
        base = self.cluster.rdzv_id or "harness"
        return replace(self.cluster, rdzv_id=f"{base}-{spec.run_key}-{spec.replicate}-{self._index}",
                       run_index=self._index)

    def _merge_replicas(self, result: Result, spec: RunSpec, launch: dp.Launch, procs: list, files: "_RunFiles",
                        timed_out: bool, leftovers: list[int]) -> Result:
        """One record from the replicas' result files, with the failed rank and its evidence as the status."""
        ranks = launch.local_ranks or tuple(r for p in launch.processes for r in p.ranks)
        results = read_rank_results(files.result, ranks)
        died: dict[int, str] = {}
        if launch.failures_from_log is not None:
            try:
                died.update(launch.failures_from_log(_tail_all(files.log)))
            except Exception:  # noqa: BLE001 - evidence is a courtesy; the status stands without it
                pass
        for proc in procs:
            for rank in proc_ranks(launch, proc, procs):
                if rank not in results and rank not in died and proc.returncode not in (0, None):
                    died[rank] = dp.describe_exit(proc.returncode)
        result = merge(result, results, ranks, self._replicas(spec), died, timed_out=timed_out,
                       node_rank=self.cluster.node_rank)
        if timed_out and result.status == "ok":
            result = result.updated(warnings=[*(result.warnings or []), (
                f"the replicas wrote their results but had not all exited after {spec.timeout_s:g} s; "
                "they were stopped and the results kept")])
        elif timed_out and result.status in ("failed", "timeout"):
            result = result.updated(status="timeout", error=(
                f"no result within {spec.timeout_s:g} s (measure.timeout_s / --timeout); every replica "
                f"stopped ({result.error})"))
        if leftovers:
            result = result.updated(distributed={**result.distributed, "killed_after_exit": len(leftovers)})
        return result

    def _wait_all(self, procs: list[subprocess.Popen], spec: RunSpec, progress: ProgressReader) -> bool:
        """Block until every process exits (True) or the timeout passes (False), reading progress between
        slices of PROGRESS_POLL_S. One process of several that fails gives the others
        distributed.FAIL_FAST_GRACE_S to write their results; then they are stopped (they would wait for
        it in an all-reduce until the timeout)."""
        deadline = time.monotonic() + spec.timeout_s
        self._lock_wait = LockWait()
        failed_at = None
        while True:
            running = [p for p in procs if p.poll() is None]
            if not running:
                self._report(spec, progress)  # what it wrote before it left
                return True
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > dp.FAIL_FAST_GRACE_S:
                for p in running:
                    _kill_group(p)
                continue
            left = deadline + self._lock_wait.seconds() - time.monotonic()
            if left <= 0:
                self._report(spec, progress)
                return all(p.poll() is not None for p in procs)  # they may have left just as time ran out
            try:
                running[0].wait(timeout=min(PROGRESS_POLL_S, left))
            except subprocess.TimeoutExpired:
                pass
            self._report(spec, progress)

    def _wait(self, proc: subprocess.Popen, spec: RunSpec, progress: ProgressReader) -> bool:
        """_wait_all of one process."""
        return self._wait_all([proc], spec, progress)

    def _report(self, spec: RunSpec, progress: ProgressReader) -> None:
        for event in progress.read():
            self._lock_wait.note(event)
            try:
                self.on_progress(spec, event)
            except Interrupted:  # a signal that arrived while the event was shown
                raise
            except Exception:  # noqa: BLE001 - a display that fails must not fail the run
                pass

    def run(self, plan: list[RunSpec], more: Callable[[list[Result]], list[RunSpec]] | None = None) -> SessionOutcome:
        """Execute every spec in order, storing each record as it arrives; then, while `more(records so far)`
        returns runs (the added rounds of `processes: auto`, harness.session.rounds), those.

        SIGINT/SIGTERM stop the running worker; what finished stays stored and the outcome says
        which signal ended the session. Under a --time-limit (`time_limit`) a run expected to end after it is not
        started, and the outcome says which and why. A result the store cannot take ends the session too: it is
        kept in a side file (Store.add), and the outcome's `store_error` says where.
        """
        if self.executor is not None:  # each round is one submission: the plan, then each added round
            outcome = self.executor.run_plan(self, plan)
            while more is not None and not outcome.interrupted and outcome.store_error is None:
                added = more(outcome.records)
                if not added:
                    break
                part = self.executor.run_plan(self, added)
                outcome.records.extend(part.records)
                outcome.interrupted, outcome.store_error = part.interrupted, part.store_error
            return outcome
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
        self._upcoming = self._next_with_workers(plan[i:], self.ahead_depth())
        self.on_start(i, len(plan), spec)
        self._index = i
        record = self.add_scaling_efficiency(self.execute(spec))
        try:
            if self.cluster.node_rank == 0:  # in a several-node run, node 0 (global rank 0) keeps the record
                self.store.add(record)
        except StoreWriteError as exc:
            outcome.store_error = exc
        outcome.records.append(record)
        self.on_result(i, len(plan), record)
        return outcome.store_error is not None

    def _next_with_workers(self, upcoming: list[RunSpec], n: int) -> list[RunSpec]:
        """The first `n` upcoming runs that start a worker: those whose workers may import ahead. Runs decided
        without a worker (`static_status`: a mode the framework lacks, a backend not installed) are passed
        over, so they do not cost the runs after them their overlap."""
        found = []
        for spec in upcoming:
            if len(found) == n:
                break
            if self.static_status(spec) is None:
                found.append(spec)
        return found

    def add_scaling_efficiency(self, record: Result) -> Result:
        """scaling_efficiency of an ok data-parallel record, against the median of the same configuration's
        1-replica records in the store (none there yet: left None; compare and report compute it later)."""
        replicas = int(record.replicas or 1)
        if replicas < 2 or record.status != "ok" or not record.median:
            return record
        key = one_replica_key(record.scenario, record.workload, record.backend,
                              record.device_requested or record.device, record.params, record.options or None)
        if key is None:
            return record
        try:
            ones = self.store.ok_medians(key)
        except Exception:  # noqa: BLE001 - a figure the store cannot give is computed later by compare
            return record
        if ones:
            record = record.updated(
                scaling_efficiency=scaling_efficiency(record.median, replicas, median(ones)),
                distributed={**(record.distributed or {}),
                             "scaling_baseline": {"run_key": key, "processes": len(ones), "median": median(ones)}})
        return record


def proc_ranks(launch: dp.Launch, proc, procs: list) -> tuple[int, ...]:
    """The ranks one started process is (a torchrun process: every rank of this node)."""
    index = procs.index(proc)
    return launch.processes[index].ranks if index < len(launch.processes) else ()


def _tail_all(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-200_000:]
    except OSError:
        return ""


@contextlib.contextmanager
def trap_signals(handler=None):
    """Turn SIGINT and SIGTERM into Interrupted for the duration (main thread only); with `handler`
    (signal.SIG_IGN, say), handle them that way instead."""

    def _raise(signum, frame):
        raise Interrupted(signum)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler if handler is not None else _raise)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
