"""Whether the process that owns a session still runs: host, boot id, pid and the pid's start time.

A session records its owner when it starts, so that a session left `running` by a process that
ended (kill -9, a power cut) is told apart from one still under way, even where its pid was reused.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from harness.results.sessions import SessionOwner


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, from /proc (None where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_owner(pid: int | None = None) -> dict:
    """Who runs a session, as its row and side files keep it (a SessionOwner's JSON): host, boot, pid and the pid's
    start time (so a reused pid is told apart)."""
    pid = os.getpid() if pid is None else pid
    stat = _proc_stat(pid)
    return {"host": platform.node(), "boot": _boot_id(), "pid": pid, "start": stat[1] if stat else None}


def owner_alive(owner: SessionOwner | Mapping | None) -> bool | None:
    """Whether a session's process still runs: True, False, or None where this machine cannot tell (an owner that
    is no owner included: a row of another version, a damaged side file)."""
    try:
        owner = SessionOwner.of(owner) if isinstance(owner, Mapping) else owner
    except ValueError:
        return None
    if not isinstance(owner, SessionOwner) or owner.host != platform.node():
        return None
    boot = _boot_id()
    if boot and owner.boot and owner.boot != boot:
        return False  # the machine has restarted since
    pid = owner.pid
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return None
    stat = _proc_stat(pid)
    if stat is not None:
        if stat[0] in ("Z", "X"):  # ended, not yet reaped
            return False
        if owner.start is not None and stat[1] != owner.start:
            return False  # the pid was reused by another process
    return True
