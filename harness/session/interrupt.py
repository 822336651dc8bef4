"""A session stopped by a signal: SIGINT and SIGTERM become `Interrupted`, raised where the session can end
cleanly (what finished stays stored, and the outcome says which signal ended it)."""

from __future__ import annotations

import contextlib
import signal


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived during a session."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


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
