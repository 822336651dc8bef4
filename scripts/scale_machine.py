"""The machine and services the scale figures were measured on (scripts/cluster_scale.py): cores, load,
versions, commit; a throw-away database on the test server."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
#: The test server as scripts/services.sh --env prints it.
DEFAULT_URL = "postgresql://harness:harness-test@127.0.0.1:5432/harness"


def server_url() -> str:
    """The PostgreSQL server's URL, password included (HARNESS_TEST_POSTGRES or the services' default)."""
    return os.environ.get("HARNESS_TEST_POSTGRES") or DEFAULT_URL


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


def with_database(url: str, name: str, *, password: bool = True) -> str:
    """The server's URL naming database `name` (without its password where `password` is false)."""
    parts = urlsplit(url)
    netloc = parts.netloc if password else parts.netloc.replace(f":{parts.password}@", "@")
    return urlunsplit(parts._replace(path="/" + name, netloc=netloc))


@contextlib.contextmanager
def scratch_database(url: str, what: str):
    """A fresh database `scale_WHAT_...` on the server for the block (its URL, password included), dropped after."""
    name = f"scale_{what}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        try:
            yield with_database(url, name)
        finally:
            admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            admin.execute(f"DROP DATABASE IF EXISTS {name}")


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
