"""Leaving a process at once, without interpreter teardown (a worker; the CLI after Arrow was loaded)."""

from __future__ import annotations

import os
import sys


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
