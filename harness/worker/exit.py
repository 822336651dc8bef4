"""Leaving a process at once, without interpreter teardown (a worker; the CLI after Arrow was loaded), and a
worker leaving when its parent does."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl(2)'s option that has the kernel send this process a signal when the thread that started it ends.
PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Have the kernel SIGKILL this worker when the process that started it ends (Linux; False elsewhere, or where
    it cannot be set). A worker is started in a session of its own (so Ctrl-C reaches only the runner), so
    neither a SIGKILL of the runner nor one of its process group reached it: it ran on, holding the host's timing
    lock, and its result went nowhere. Its own death releases the lock (flock(2) ends with the process). A worker
    whose parent ended before this call (it is init's now) leaves at once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # orphaned before the kernel could be told: nobody waits for this run
        os._exit(0)
    return True


def exit_now(code: int) -> None:
    """Leave without interpreter teardown: the result is on disk, and teardown can deadlock.

    After an allocation failure in the middle of a backward pass, torch 2.0.1 keeps the autograd
    graph alive in a thread-local queue; at exit its destructor frees tensors made with
    torch.from_numpy, whose deleter waits for a GIL that finalization will never give back
    (seen with gdb: __call_tls_dtors -> ReadyQueue -> tensor_from_numpy deleter -> take_gil).
    Nothing a worker owns needs an orderly shutdown, so it skips exit handlers altogether.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the exit
            pass
    os._exit(code)
