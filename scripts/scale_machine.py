"""The machine and services the scale figures were measured on (scripts/cluster_scale.py): cores, load,
versions, commit; a throw-away database on the test server."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
from pathlib import Path

import psycopg

from tests import services
from tests.services import server_url

ROOT = Path(__file__).resolve().parent.parent


def _out(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def load() -> list[float]:
    """The load average (1, 5, 15 minutes), rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """Where and when: date, cores, load average, versions of Slurm, PostgreSQL, psycopg, Python, the commit."""
    server = None
    with contextlib.suppress(psycopg.Error), psycopg.connect(server_url(), connect_timeout=5) as db:
        server = db.execute("SHOW server_version").fetchone()[0]
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cores": os.cpu_count(), "load_average": load(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "os": platform.platform(), "python": platform.python_version(),
            "slurm": _out("sinfo", "--version"), "postgresql": server,
            "psycopg": psycopg.__version__, "commit": _out("git", "rev-parse", "HEAD"),
            "tree_clean": _out("git", "status", "--porcelain", "--untracked-files=no") == ""}


@contextlib.contextmanager
def scratch_database(url: str, what: str):
    """A fresh database `scale_WHAT_...` on the server for the block (its URL, password included), dropped after
    (tests.services.scratch_database, as the tests make theirs)."""
    with psycopg.connect(url, autocommit=True) as admin, services.scratch_database(admin, url, f"scale_{what}") as db:
        yield db


def sizes(url: str) -> dict:
    """The database's rows and bytes: results and sessions rows, each table with its indexes and TOAST
    (pg_total_relation_size), the whole database, and the plan as stored (its text's bytes)."""
    with psycopg.connect(url) as db:
        one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
        return {"results_rows": one("SELECT count(*) FROM results"),
                "sessions_rows": one("SELECT count(*) FROM sessions"),
                "results_bytes": one("SELECT pg_total_relation_size('results')"),
                "sessions_bytes": one("SELECT pg_total_relation_size('sessions')"),
                "database_bytes": one("SELECT pg_database_size(current_database())"),
                "plan_text_bytes": one("SELECT max(octet_length(plan::text)) FROM sessions"),
                "plan_stored_bytes": one("SELECT max(pg_column_size(plan)) FROM sessions"),
                "statuses": dict(db.execute("SELECT status, count(*) FROM results GROUP BY status").fetchall())}
