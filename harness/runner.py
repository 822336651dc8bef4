"""The runner: executes a plan, one worker process per run, and stores each result as it arrives.

A worker that raises, crashes, exits hard or outlives its timeout becomes that run's status; the
session goes on. The parent blocks in wait() (no busy-waiting) so it takes no core from the run: in
slices of PROGRESS_POLL_S, between which it reads the progress events the worker appended to
$HARNESS_PROGRESS_FILE (harness.execute.progress_writer) and hands each to `on_progress`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.backend import available_backends
from harness.errors import StoreWriteError
from harness.plan import RunSpec
from harness.record import FAILING_STATUSES, blank_record, utc_now
from harness.store import Store

#: Seconds a worker gets to exit after SIGTERM before SIGKILL.
TERM_GRACE_S = 5.0
LOG_TAIL_CHARS = 3000
#: Seconds the runner blocks in wait() between two reads of a worker's progress file.
PROGRESS_POLL_S = 0.5


class ProgressReader:
    """New progress events of one worker: whole JSON lines appended to a file since the last read.

    A line the worker is still writing is left for the next read; a line that is not a JSON object
    is skipped (progress is a courtesy: it never fails a run).
    """

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0

    def read(self) -> list[dict]:
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
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


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
    from harness import env as env_mod

    try:
        return {**env_mod.capture(), "framework": {}, "captured_by": "runner"}
    except Exception as exc:  # noqa: BLE001 - a record is never lost for want of its environment
        return {"captured_by": "runner", "capture_error": f"{type(exc).__name__}: {exc}"}


@dataclass
class SessionOutcome:
    """What a session produced: the records, in plan order, whether it was interrupted, and whether
    the store failed (then the records are in the side file the error names)."""

    records: list[dict] = field(default_factory=list)
    interrupted: int | None = None
    store_error: StoreWriteError | None = None

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.records if r.get("status") in FAILING_STATUSES]


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
    ):
        self.store = store
        self.memory_limit_bytes = memory_limit_bytes
        self.on_start = on_start or (lambda i, n, spec: None)
        self.on_result = on_result or (lambda i, n, record: None)
        #: on_progress(spec, event): each progress event of the running worker (`phase` first_step,
        #: warmup or block, with its figures; see harness.measure.run_timed), as it arrives.
        self.on_progress = on_progress or (lambda spec, event: None)
        self._backends = available_backends()

    def static_status(self, spec: RunSpec) -> tuple[str, str] | None:
        """(status, reason) for a run decided without a worker: backend missing or combination unmapped."""
        backend = self._backends.get(spec.backend)
        if backend is None:
            return "unsupported", f"no backend named {spec.backend!r} is registered"
        if not backend.installed():
            hint = f" ({backend.install_hint})" if backend.install_hint else ""
            return "unsupported", f"{spec.backend} is not installed in this Python{hint}"
        reason = backend.unsupported_reason(spec.workload, spec.params, spec.device, spec.options)
        if reason:
            return "unsupported", reason
        return None

    def execute(self, spec: RunSpec) -> dict:
        """Execute one spec in a fresh worker process and return its complete record (not stored)."""
        record = blank_record(spec)
        record["started_at"] = utc_now()
        static = self.static_status(spec)
        if static is not None:
            record["status"], record["error"] = static
            record["duration_s"] = 0.0
            backend = self._backends.get(spec.backend)
            record["framework_version"] = backend.framework_version() if backend else None
            record["env"] = runner_env()
            return record
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="harness-run-") as tmp:
            spec_path = Path(tmp, "spec.json")
            result_path = Path(tmp, "result.json")
            log_path = Path(tmp, "worker.log")
            progress = ProgressReader(Path(tmp, "progress.jsonl"))
            spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
            env = worker_env(self.memory_limit_bytes, self._backends[spec.backend].worker_env(
                spec.options, probe=bool(spec.measure.get("probe"))))
            env["HARNESS_PROGRESS_FILE"] = str(progress.path)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "harness.worker", str(spec_path), str(result_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # the terminal's Ctrl-C reaches the runner, which decides
                )
                try:
                    timed_out = not self._wait(proc, spec, progress)
                except BaseException:
                    _kill_group(proc)
                    raise
                if timed_out:
                    _kill_group(proc)
            if result_path.exists():  # written atomically: complete if it is there at all
                record.update(json.loads(result_path.read_text(encoding="utf-8")))
                if timed_out:  # measured and written, then stuck on its way out: keep what it measured
                    record["warnings"] = [*(record.get("warnings") or []), (
                        f"the worker wrote its result but had not exited after {spec.timeout_s:g} s; "
                        "it was stopped and its result kept")]
            elif timed_out:
                record["status"] = "timeout"
                record["error"] = f"no result within {spec.timeout_s:g} s (measure.timeout_s / --timeout); worker stopped"
            else:
                record["status"] = "failed"
                record["error"] = _died(proc.returncode)
            if not record.get("env"):
                record["env"] = runner_env()
            if record.get("status") != "ok":
                tail = _tail(log_path)
                if tail:
                    record["log_tail"] = tail
        record["duration_s"] = time.perf_counter() - started
        return record

    def _wait(self, proc: subprocess.Popen, spec: RunSpec, progress: ProgressReader) -> bool:
        """Block until the worker exits (True) or its timeout passes (False), reading its progress
        between slices of PROGRESS_POLL_S. The timeout counts from the start, as one wait() would."""
        deadline = time.monotonic() + spec.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._report(spec, progress)
                return proc.poll() is not None  # it may have left just as its time ran out
            try:
                proc.wait(timeout=min(PROGRESS_POLL_S, left))
            except subprocess.TimeoutExpired:
                self._report(spec, progress)
                continue
            self._report(spec, progress)  # what it wrote before it left
            return True

    def _report(self, spec: RunSpec, progress: ProgressReader) -> None:
        for event in progress.read():
            try:
                self.on_progress(spec, event)
            except Interrupted:  # a signal that arrived while the event was shown
                raise
            except Exception:  # noqa: BLE001 - a display that fails must not fail the run
                pass

    def run(self, plan: list[RunSpec]) -> SessionOutcome:
        """Execute every spec in order, storing each record as it arrives.

        SIGINT/SIGTERM stop the running worker; what finished stays stored and the outcome says
        which signal ended the session. A result the store cannot take ends the session too: it is
        kept in a side file (Store.add), and the outcome's `store_error` says where.
        """
        outcome = SessionOutcome()
        with trap_signals():
            try:
                for i, spec in enumerate(plan, 1):
                    self.on_start(i, len(plan), spec)
                    record = self.execute(spec)
                    try:
                        self.store.add(record)
                    except StoreWriteError as exc:
                        outcome.store_error = exc
                    outcome.records.append(record)
                    self.on_result(i, len(plan), record)
                    if outcome.store_error is not None:
                        break
            except (Interrupted, KeyboardInterrupt) as exc:
                outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
        return outcome


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
