"""What a running worker tells the parent: its progress events, read from the file it appends them to
($HARNESS_PROGRESS_FILE, harness.worker.execute.progress_writer), and the time it has waited for the host's
timing lock, which is not counted against its timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from harness.seam.runspec import RunSpec
from harness.session.interrupt import Interrupted


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


def show_progress(on_progress: Callable[[RunSpec, dict], None], spec: RunSpec, event: dict) -> None:
    """Hand one progress event to the observer; a display that fails does not fail the run, a signal that
    arrived while it was shown still stops the session."""
    try:
        on_progress(spec, event)
    except Interrupted:
        raise
    except Exception:  # noqa: BLE001 - a display that fails must not fail the run
        pass
