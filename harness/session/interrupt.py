"""A session stopped by a signal: SIGINT, SIGTERM and SIGHUP become `Interrupted`, raised where the session can end
cleanly (what finished stays stored, and the outcome says which signal ended it).

SIGHUP is what a session gets when its terminal goes (an ssh connection drops, a terminal window is closed):
left at its default it ended the process at once, with no message and the session left `running`."""

from __future__ import annotations

import contextlib
import signal

#: The signals that stop a session cleanly (exit 128 + the signal: 130, 143, 129).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived during a session."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def trap_signals(handler=None):
    """Turn STOP_SIGNALS into Interrupted for the duration (main thread only); with `handler`
    (signal.SIG_IGN, say), handle them that way instead."""

    def _raise(signum, frame):
        raise Interrupted(signum)

    previous = {}
    for sig in STOP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler if handler is not None else _raise)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
