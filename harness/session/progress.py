"""What a running worker tells the parent: its progress events, read from the file it appends them to
($HARNESS_PROGRESS_FILE, harness.worker.execute.progress_writer), and the time it has waited for the host's
timing lock, which is not counted against its timeout."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.seam.runspec import RunSpec
from harness.session.interrupt import Interrupted

#: The figures a progress event may carry (harness.timing.loop.run_timed's phases, the capacity search's answers).
EVENT_FIGURES = ("first_step_s", "warmup", "block", "repeats", "max_repeats", "block_s", "rate", "waited_s",
                 "seconds", "peak_allocated_bytes")


def _figure(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ProgressEvent:
    """One progress event, typed from the JSON object the worker appended (or the capacity search made): its phase,
    its figures (None where it has none or one that is no number) and the words of a lock wait or a probe's answer."""

    phase: str
    figures: Mapping[str, float | None] = field(default_factory=dict)
    #: host_lock: whether the worker is waiting (else it got the lock), which lock and who holds it
    waiting: bool = False
    lock: Any = None
    holder: Any = None
    #: probe_done: whether the batch fit (None: the probe failed otherwise), the probe's status and where its time went
    fits: bool | None = None
    status: Any = None
    phases_s: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, event) -> "ProgressEvent | None":
        """The event of a JSON object; None for anything else, or an object without a phase."""
        if isinstance(event, ProgressEvent):
            return event
        if not isinstance(event, Mapping):
            return None
        given = {**dict.fromkeys(("phase", "waiting", "lock", "holder", "fits", "status", "phases_s", *EVENT_FIGURES)),
                 **event}
        if not isinstance(given["phase"], str):
            return None
        parts = given["phases_s"] if isinstance(given["phases_s"], Mapping) else {}
        return cls(phase=given["phase"], figures={name: _figure(given[name]) for name in EVENT_FIGURES},
                   waiting=bool(given["waiting"]), lock=given["lock"], holder=given["holder"], fits=given["fits"],
                   status=given["status"], phases_s={k: v for k, v in parts.items() if _figure(v) is not None})

    def figure(self, name: str) -> float | None:
        """One of EVENT_FIGURES (None where the event has none)."""
        return self.figures[name]


class ProgressReader:
    """New progress events of one worker: whole JSON lines appended to a file since the last read.

    A line the worker is still writing is left for the next read; a line that is not a JSON object
    is skipped (progress is a courtesy: it never fails a run).
    """

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0

    def read(self) -> list[dict]:
        """The events appended since the last read, as the JSON objects the worker wrote (what observers get)."""
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
            if ProgressEvent.of(event) is not None:
                events.append(event)
        return events


class LockWait:
    """How long the running worker has waited for the host's timing lock (its `host_lock` progress events,
    harness.worker.hostlock): that time is another session's, so it does not count against the run's timeout."""

    def __init__(self):
        self.waited_s = 0.0
        self._since: float | None = None

    def note(self, given: dict | ProgressEvent) -> None:
        """Take in one progress event (only `host_lock` ones count)."""
        event = ProgressEvent.of(given)
        if event is None or event.phase != "host_lock":
            return
        if event.waiting:
            self._since = time.monotonic()
        elif self._since is not None:
            self.waited_s += time.monotonic() - self._since
            self._since = None

    def seconds(self) -> float:
        """Seconds waited so far, the wait still going on included."""
        return self.waited_s + (time.monotonic() - self._since if self._since is not None else 0.0)


def show_progress(on_progress: Callable[[RunSpec, dict], None], spec: RunSpec, event: dict) -> None:
    """Hand one progress event to the observer; a display that fails does not fail the run, a signal that
    arrived while it was shown still stops the session."""
    try:
        on_progress(spec, event)
    except Interrupted:
        raise
    except Exception:  # noqa: BLE001 - a display that fails must not fail the run
        pass
