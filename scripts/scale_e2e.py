"""A session of many framework-free runs end to end through `--executor slurm` into PostgreSQL, watched from
outside (scripts/cluster_scale.py, part e2e): wall time, rows and size, the submitter's peak RSS, and every
squeue and sacct call it makes, counted by a shim first on its PATH that logs each call and runs the real one."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import psycopg
import yaml
from scale_machine import ROOT, load, scratch_database, sizes

from tests.services import with_database

#: The commands whose calls are counted (the executor's polls and its fallback for jobs squeue forgot).
COUNTED = ("squeue", "sacct", "sbatch", "scancel")
#: How often the watcher samples the submitter's RSS and the stored rows, in seconds.
SAMPLE_S = 0.25


def _shims(folder: Path, log: Path) -> None:
    """A script per counted command in `folder` that logs its call (time, name) and runs the real command."""
    folder.mkdir(parents=True)
    for name in COUNTED:
        real = shutil.which(name)
        if real is None:
            raise SystemExit(f"cluster_scale: {name} is not on PATH: start the services (scripts/services.sh)")
        shim = folder / name
        shim.write_text(f'#!/bin/sh\necho "$(date +%s.%N) {name}" >> {log}\nexec {real} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)


def write_scenario(path: Path, runs: int) -> None:
    """`runs` configurations of noop, one process each, a step of microseconds: count 1..runs, or (a scenario
    file holds at most 10,000 values) over 1,000 runs count 1..1,000 times 1..runs/1,000."""
    sweep = {"count": list(range(1, runs + 1))} if runs <= 1000 else \
        {"count": list(range(1, 1001)), "times": list(range(1, runs // 1000 + 1))}
    path.write_text(yaml.safe_dump({
        "name": "scale", "workload": "noop", "params": {"count": 100},
        "measure": {"warmup": 0, "steps": 1, "repeats": 3, "timeout_s": 120, "processes": 1},
        "backends": ["python"], "devices": ["cpu"], "sweep": sweep,
    }), encoding="utf-8")


def _environment(work: Path, url: str) -> dict:
    """The submitter's environment: the plugin registered (tests/noop_plugin.py), the shims first on PATH, the
    password in PGPASSWORD, a timing lock of this session's own (other sessions' runs on this shared machine
    would hold its runs back, which is not what is measured)."""
    from tests.noop_plugin import REGISTER

    return {**os.environ, **REGISTER, "PYTHONPATH": str(ROOT), "PATH": f"{work / 'bin'}:{os.environ['PATH']}",
            "PGPASSWORD": urlsplit(url).password or "", "HARNESS_HOST_LOCK": str(work / "timing.lock")}


def _stored(db: psycopg.Connection) -> int:
    try:
        return db.execute("SELECT count(*) FROM results").fetchone()[0]
    except psycopg.Error:  # the submitter has not made the tables yet
        return 0


class _Watch:
    """What is seen of the submitter while it runs: RSS peak, stored rows over time, load, its stderr lines."""

    def __init__(self, proc: subprocess.Popen, started: float):
        self.proc, self.started = proc, started
        self.peak_rss = 0
        self.first_stored_s: float | None = None
        self.loads: list[list[float]] = []
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((round(time.monotonic() - self.started, 2), line.rstrip()))

    def sample(self, db: psycopg.Connection, tick: int) -> None:
        """One look: the RSS of the submitter (psutil), the stored rows until the first, every 10 s the load."""
        try:
            self.peak_rss = max(self.peak_rss, psutil.Process(self.proc.pid).memory_info().rss)
        except psutil.Error:
            pass
        if self.first_stored_s is None and _stored(db) > 0:
            self.first_stored_s = round(time.monotonic() - self.started, 2)
        if tick % 40 == 0:
            self.loads.append(load())


def _in_checkout(lines: list[str]) -> list[str]:
    """Output lines as the measurement keeps them: paths inside the checkout relative to it (a traceback's)."""
    return [line.replace(f"{ROOT}{os.sep}", "") for line in lines]


def _calls(log: Path, wall_s: float) -> dict:
    """Each counted command's calls, in all and per minute of the session's wall time."""
    names = [line.split()[1] for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    return {name: {"calls": names.count(name), "per_minute": round(names.count(name) / (wall_s / 60), 1)}
            for name in COUNTED}


def _submitted_s(lines: list[tuple[float, str]]) -> float | None:
    """When the submitter said its last array was submitted (seconds from its start)."""
    said = [at for at, line in lines if "submitted as job array" in line]
    return said[-1] if said else None


@contextlib.contextmanager
def _session(url: str, what: str, runs: int, *extra: str):
    """(its folder, its database's URL, the submitter's argv) of a `runs`-run session into a scratch database,
    the counting shims in the folder, both removed after the block."""
    with scratch_database(url, what) as db_url, tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        work = Path(tmp)
        _shims(work / "bin", work / "calls.log")
        write_scenario(work / "scale.yaml", runs)
        store = with_database(db_url, urlsplit(db_url).path.strip("/"), password=False)
        yield work, db_url, [sys.executable, "-m", "harness", "run", "scale.yaml", "--executor", "slurm",
                             "--store", store, "--max-runs", str(runs), *extra]


def e2e(url: str, runs: int) -> dict:
    """Run the session and measure it (see the module's docstring); raises SystemExit where it failed."""
    with _session(url, "e2e", runs) as (work, db_url, argv):
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=work, env=_environment(work, db_url), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        watch, tick = _Watch(proc, started), 0
        with psycopg.connect(db_url, autocommit=True) as db:
            while True:
                done_pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if done_pid:
                    break
                watch.sample(db, tick)
                tick += 1
                time.sleep(SAMPLE_S)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        watch.reader.join(timeout=10)
        figures = {"runs": runs, "argv": ["harness", *argv[3:]], "exit_code": proc.returncode,
                   "wall_s": round(wall, 1), "submitted_s": _submitted_s(watch.lines),
                   "first_stored_s": watch.first_stored_s,
                   "submitter_peak_rss_bytes": usage.ru_maxrss * 1024, "submitter_peak_rss_sampled_bytes": watch.peak_rss,
                   "submitter_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                   "load_average_samples": watch.loads, "calls": _calls(work / "calls.log", wall),
                   "slurm_lines": [line for _, line in watch.lines if line.startswith("slurm:")][:20],
                   "stderr_tail": _in_checkout([line for _, line in watch.lines[-5:]]), **sizes(db_url)}
    return figures


def submitted_held(url: str, runs: int, patience_s: float = 600.0) -> dict:
    """A `runs`-run session submitted with its jobs held (`--slurm-arg hold=`: none runs), to see what the
    submitter does where Slurm refuses part of it: what it says and records, then, stopped with SIGTERM (its
    held jobs would wait for ever), its exit and the tasks it left queued (then cancelled here)."""
    with _session(url, "held", runs, "--slurm-arg", "hold=", "-q") as (work, db_url, argv):
        # every task counts against MaxJobCount, and so does every ended job Slurm still keeps (MinJobAge)
        known = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--format=%i"],
                               capture_output=True, text=True).stdout.split()
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=work, env=_environment(work, db_url), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines, refused_s = [], None
        for line in proc.stdout:  # until sbatch's refusal is said (or the submitter ends)
            lines.append(line.rstrip())
            if "sbatch refused a job array" in line:
                refused_s = time.monotonic() - started
                break
            if time.monotonic() - started > patience_s:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=600)
        lines += rest.splitlines()
        wall = time.monotonic() - started
        arrays = [line.split()[-1] for line in lines if "submitted as job array" in line]
        left = subprocess.run(["squeue", "--noheader", "--array", f"--jobs={','.join(arrays)}", "--format=%i"],
                              capture_output=True, text=True).stdout.split() if arrays else []
        subprocess.run(["scancel", *arrays], capture_output=True)
        said = next((line for line in lines if "sbatch refused a job array" in line), None)
        return {"runs": runs, "jobs_known_before": len(known), "argv": ["harness", *argv[3:]], "refused_after_s": refused_s and round(refused_s, 1),
                "said": said, "arrays_submitted": len(arrays), "exit_code_after_sigterm": proc.returncode,
                "wall_s": round(wall, 1), "tasks_left_queued": len(left), "traceback": "Traceback" in "\n".join(lines),
                "output_tail": _in_checkout(lines[-6:]), "calls": _calls(work / "calls.log", wall)}
