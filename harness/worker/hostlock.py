"""The host-wide timing lock: two harness sessions on one host never time a run at the same moment.

A worker holds the lock from its first step until its last read-back (harness.worker.execute.time_run);
a worker that finds it taken says so (a `host_lock` progress event the console shows), waits, and its
record keeps how long (`env.isolation`). The lock is an advisory flock(2) on one file:

- its place is host-wide on purpose: `/tmp/harness-timing.lock`, not $XDG_RUNTIME_DIR (one folder per user:
  two users' sessions would not see each other's lock) nor $TMPDIR (Slurm and others point it at a folder of
  each job). HARNESS_HOST_LOCK names another file (a host where /tmp is private to each job or container);
- flock(2) is released by the kernel when its holder exits, is killed or crashes: no stale lock to clean;
- `share_host` (`measure.share_host`, `harness run --share-host`) takes the lock shared: runs that share
  the host may time beside one another (one per GPU), never beside an exclusive one, and their records say
  so (harness.machine.envcheck marks them as measured on a busy machine);
- one run takes it once: the worker of a plain run; the runner for a data-parallel run on one node, from
  its launch to its last replica's exit (replicas waiting for a lock inside a collective could outlast the
  collective's timeout); never for a run over several nodes (two such sessions, each holding one node's
  lock and waiting for the other's, would wait for ever: the scheduler keeps them apart). A Slurm job
  takes the lock of the node it runs on, like any session there;
- nothing waits in a cycle: the runs of one session follow one another, and the next runs' workers,
  started ahead (harness.worker.neighbours), only import until each is handed its run, so none holds
  the lock while paused. A capacity probe takes the lock too: it computes on the device another session
  may be timing.

filelock (a dependency of torch) offers an exclusive lock only; the shared mode needs flock(2)'s
LOCK_SH, which fcntl gives directly.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from typing import Callable, Iterator

from pydantic import BaseModel, ConfigDict

from harness.machine.variables import variables

#: The lock file, host-wide (see the module's docstring for why not a per-user or per-job folder).
DEFAULT_LOCK = "/tmp/harness-timing.lock"
#: Names another lock file (one every session on the host sees).
LOCK_VARIABLE = "HARNESS_HOST_LOCK"
#: Set (to 1) by the runner in the replicas of a data-parallel run, for which it holds the lock itself.
HELD_VARIABLE = "HARNESS_HOST_LOCK_HELD"
#: Whom the lock holder is: written beside the lock by each holder, read by a waiter to say whom it waits for.
HOLDER_SUFFIX = ".holder"


def lock_path() -> str:
    """The lock file of this host: $HARNESS_HOST_LOCK, else DEFAULT_LOCK."""
    return variables().host_lock or DEFAULT_LOCK


def _open(path: str) -> int:
    """The lock file, opened for flock; created readable and writable by every user of the host (a lock
    another user's session cannot open would not keep the two apart)."""
    try:
        return os.open(path, os.O_RDONLY)  # an existing file: no O_CREAT (fs.protected_regular forbids it in /tmp)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # the umask took some bits away
        return fd


class LockHolder(BaseModel):
    """Who holds (or last held) the lock, as its holder wrote it beside the lock: its pid, the session process's
    pid and command, the run and the session; each None where it did not say."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int | None = None
    session_pid: int | None = None
    command: str | None = None
    run: str | None = None
    session: str | None = None

    def described(self) -> str:
        """The holder in words: `pid 123 (harness run quickstart), run torch on cpu, session abc` (the session's pid
        and command where the holder wrote them, else its own pid)."""
        pid = self.session_pid or self.pid
        parts = [f"pid {pid}" + (f" ({self.command})" if self.command else "")] if pid else []
        parts += [f"{key} {value}" for key, value in (("run", self.run), ("session", self.session)) if value]
        return ", ".join(parts) or "another harness session"


def holder(path: str) -> LockHolder:
    """Who holds (or last held) the lock; an empty LockHolder where the file is absent, unreadable or not one
    (it is a courtesy to a waiter, never a reason to fail)."""
    try:
        with open(path + HOLDER_SUFFIX, encoding="utf-8") as fh:
            return LockHolder.model_validate(json.load(fh))
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return LockHolder()


def _note_holder(path: str, who: dict) -> None:
    """Write who holds the lock beside it (a courtesy for waiters: never fails the run)."""
    tmp = f"{path}{HOLDER_SUFFIX}.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({**who, "pid": os.getpid(), "since": time.time()}, fh)
        os.chmod(tmp, 0o666)
        os.replace(tmp, path + HOLDER_SUFFIX)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def process_command(pid: int) -> str | None:
    """A process's command line as its user typed it (`harness run quickstart -q`: the Python that runs
    harness left out), from /proc; None where it cannot be read (another OS, a process gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [part.decode(errors="replace") for part in fh.read().split(b"\0") if part]
    except OSError:
        return None
    for at in range(len(argv) - 1):
        if argv[at] == "-m" and argv[at + 1] == "harness":
            return " ".join(["harness", *argv[at + 2:]])
    if argv and os.path.basename(argv[0]) != "harness" and len(argv) > 1 and os.path.basename(argv[1]) == "harness":
        argv = argv[1:]  # `python .../bin/harness run ...`
    return " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else None


def session_of(pid: int) -> dict:
    """Who a waiter is told holds the lock: the session process's pid and its command."""
    command = process_command(pid)
    return {"session_pid": pid, **({"command": command} if command else {})}


def describe_holder(who: dict) -> str:
    """A lock holder (the JSON object it wrote) in words (LockHolder.described)."""
    return LockHolder.model_validate(who).described()


@contextlib.contextmanager
def timing_lock(share: bool, who: dict, report: Callable[..., None] | None = None) -> Iterator[dict]:
    """Hold the host's timing lock for the block (shared when `share`), waiting for it where another
    session holds it; yields the record's `isolation`: mode (`exclusive`, `shared`, or `unlocked` where the
    lock file could not be opened, with the reason), the lock's path, `waited_s` and whom it waited for,
    and the epoch seconds the block held it (`held_from`, `held_to`, the latter set as the block ends).
    `report(phase, **figures)` hears `host_lock` once with `waiting=True` before it waits, once more with
    `waited_s` when it has the lock."""
    tell = report or (lambda phase, **figures: None)
    path = lock_path()
    isolation: dict = {"mode": "shared" if share else "exclusive", "lock": path, "waited_s": 0.0}
    try:
        fd = _open(path)
    except OSError as exc:
        isolation.update(mode="unlocked", reason=f"cannot open {path}: {exc.strerror or exc}")
        yield isolation
        return
    try:
        _acquire(fd, fcntl.LOCK_SH if share else fcntl.LOCK_EX, path, isolation, tell)
        _note_holder(path, {**who, "shared": share})
        isolation["held_from"] = time.time()
        try:
            yield isolation
        finally:
            isolation["held_to"] = time.time()
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def _acquire(fd: int, kind: int, path: str, isolation: dict, tell: Callable[..., None]) -> None:
    """flock(fd, kind): at once where it is free; else say whom it waits for, wait, and note how long."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    other = holder(path)
    isolation["waited_for"] = other.described()
    tell("host_lock", waiting=True, holder=isolation["waited_for"], lock=path)
    began = time.perf_counter()
    fcntl.flock(fd, kind)
    isolation["waited_s"] = round(time.perf_counter() - began, 3)
    tell("host_lock", waiting=False, waited_s=isolation["waited_s"], lock=path)
