"""One run's worker process, as the parent sees it: its environment, the files between the two, its start,
the wait for it (in slices of PROGRESS_POLL_S, blocked in wait(), so it takes no core from the run, reading
its progress between slices), its stop, and the record of how it ended.

A worker that raises, crashes, exits hard or outlives its timeout becomes that run's status; the session
goes on. A result on disk is kept even if its worker then outlives the timeout.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.machine import env as env_mod
from harness.results.record import RecordError, Result
from harness.seam import distributed as dp
from harness.seam.runspec import RunSpec
from harness.session.progress import LockWait, ProgressReader

#: Seconds a worker gets to exit after SIGTERM before SIGKILL.
TERM_GRACE_S = 5.0
#: Characters of a worker's log kept in the record of a run that did not end ok.
LOG_TAIL_CHARS = 3000
#: Seconds the parent blocks in wait() between two reads of a worker's progress file.
PROGRESS_POLL_S = 0.5
#: Bytes free under which the disk of a run's folder counts as full, where a worker left without a result.
FULL_DISK_BYTES = 1 << 20


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


@dataclass(frozen=True)
class RunFiles:
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
    def progress(self) -> ProgressReader:
        """The reader of the worker's progress events."""
        return ProgressReader(self.folder / "progress.jsonl")


def continue_group(proc: subprocess.Popen) -> None:
    """Let a paused process group go on (SIGCONT); nothing if it has left."""
    try:
        os.killpg(proc.pid, signal.SIGCONT)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(proc: subprocess.Popen) -> None:
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


def start_and_wait(files: RunFiles, commands: list[tuple[list[str], dict]], taken: subprocess.Popen | None,
                   timeout_s: float, show: Callable[[dict], None],
                   started: Callable[[], None]) -> tuple[list[subprocess.Popen], bool, list[int]]:
    """Start the run's processes (`commands`: argv and environment of each), or let the worker started ahead for
    it (`taken`, its framework already imported: the spec handed it the run) go on; call `started`, wait for
    them and stop what is left: (processes, whether the timeout passed, pids of registered replicas killed after
    the launch ended)."""
    procs: list[subprocess.Popen] = [taken] if taken is not None else []
    with open(files.log, "ab") as log:
        try:
            for argv, proc_env in commands if taken is None else []:
                procs.append(subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=proc_env,
                    start_new_session=True,  # the terminal's Ctrl-C reaches the runner, which decides
                ))
            started()
            timed_out = not wait_all(procs, timeout_s, files.progress, show)
        except BaseException:
            for proc in procs:
                kill_group(proc)
            dp.kill_registered(files.result)
            raise
        for proc in procs:
            if timed_out or proc.poll() is None:
                kill_group(proc)
        # a launcher may start its replicas in sessions of their own: end any that outlived it
        leftovers = dp.kill_registered(files.result)
    return procs, timed_out, leftovers


def wait_all(procs: list[subprocess.Popen], timeout_s: float, progress: ProgressReader,
             show: Callable[[dict], None]) -> bool:
    """Block until every process exits (True) or the timeout passes (False), handing each progress event to
    `show` between slices of PROGRESS_POLL_S; the time a worker waits for the host's timing lock is not counted.
    One process of several that fails gives the others distributed.FAIL_FAST_GRACE_S to write their results;
    then they are stopped (they would wait for it in an all-reduce until the timeout)."""
    deadline = time.monotonic() + timeout_s
    lock_wait = LockWait()

    def report() -> None:
        for event in progress.read():
            lock_wait.note(event)
            show(event)

    failed_at = None
    while True:
        running = [p for p in procs if p.poll() is None]
        if not running:
            report()  # what it wrote before it left
            return True
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > dp.FAIL_FAST_GRACE_S:
            for p in running:
                kill_group(p)
            continue
        left = deadline + lock_wait.seconds() - time.monotonic()
        if left <= 0:
            report()
            return all(p.poll() is not None for p in procs)  # they may have left just as time ran out
        try:
            running[0].wait(timeout=min(PROGRESS_POLL_S, left))
        except subprocess.TimeoutExpired:
            pass
        report()


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `chars` characters of a worker's log, stripped; empty where there is none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-chars:].strip()


def _died(returncode: int) -> str:
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        hint = " (the OS out-of-memory killer sends SIGKILL)" if -returncode == signal.SIGKILL else ""
        return f"worker killed by signal {name}{hint} before writing a result"
    return f"worker exited with code {returncode} before writing a result"


def full_disk(folder: Path) -> str | None:
    """What to say where the disk holding a run's folder (in TMPDIR) is full: a worker that cannot write its files
    exits with code 1 and an empty log, which said nothing of the disk. None where it is not full."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free >= FULL_DISK_BYTES:
        return None
    return (f"the disk of the run's folder {folder} is full ({free} bytes free): point TMPDIR at a folder with "
            "space")


def runner_env() -> dict:
    """The environment as the runner sees it, for a record whose worker wrote none (a timeout, a
    worker killed or dead before its result, a run decided without a worker): same machine, same
    Python; the framework's own part is unknown."""

    try:
        return {**env_mod.capture(), "framework": {}, "captured_by": "runner"}
    except Exception as exc:  # noqa: BLE001 - a record is never lost for want of its environment
        return {"captured_by": "runner", "capture_error": f"{type(exc).__name__}: {exc}"}


def read_worker_result(path: Path) -> dict | None:
    """The record fields a worker wrote to its result file (written atomically: whole if there at all), or None."""
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def with_written(result: Result, written: dict) -> Result:
    """The record with what its worker wrote laid over it; a failure that says so where that is no record (a
    worker of another version, or one that broke the contract)."""
    try:
        return result.merged(written)
    except RecordError as exc:
        return unwritten(result, exc)


def unwritten(result: Result, exc: RecordError) -> Result:
    """The failure of a run whose worker wrote a result that is no record."""
    return result.updated(status="failed", error=f"the worker's result holds no record: {exc}")


def worker_result(result: Result, spec: RunSpec, path: Path, timed_out: bool, proc: subprocess.Popen) -> Result:
    """The record of a plain run once its worker is gone: what it wrote, or how it ended without writing."""
    written = read_worker_result(path)
    if written is not None:
        try:
            result = result.merged(written)
        except RecordError as exc:
            return unwritten(result, exc)
        if timed_out:  # measured and written, then stuck on its way out: keep what it measured
            result = result.with_warning(f"the worker wrote its result but had not exited after {spec.timeout_s:g} s; "
                                         "it was stopped and its result kept")
        return result
    if timed_out:
        return result.updated(status="timeout", error=f"no result within {spec.timeout_s:g} s (measure.timeout_s / "
                                                      "--timeout); worker stopped")
    disk = full_disk(path.parent)
    return result.updated(status="failed", error=_died(proc.returncode) + (f"; {disk}" if disk else ""))


def with_evidence(result: Result, log_path: Path) -> Result:
    """The record with the runner's environment where the worker wrote none and, unless ok, the log's tail."""
    if not result.env:
        result = result.updated(env=runner_env())
    if result.status != "ok":
        tail = log_tail(log_path)
        if tail:
            result = result.with_note("log_tail", tail)
    return result


def timed(result: Result, started: float, *, worker_ran: bool) -> Result:
    """The record's duration_s from the runner's clock; with the worker's own duration, the rest of it as the
    `process` phase (the worker's start, imports and exit, and the runner's reading of its result)."""
    worker_s = result.duration_s if worker_ran else None
    duration_s = time.perf_counter() - started
    if worker_s is not None and result.phases_s:
        return result.updated(duration_s=duration_s,
                              phases_s=result.phases_s.updated(process=round(duration_s - worker_s, 3)))
    return result.updated(duration_s=duration_s)
