"""The real services the cluster tests drive (scripts/services.sh starts them): a PostgreSQL server and a
single-node Slurm. Without them a test skips, naming the script; where CI requires them
(HARNESS_REQUIRE_SERVICES=1), it fails instead."""

import contextlib
import os
import shutil
import subprocess
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

#: The database server the tests use, as scripts/services.sh --env prints it.
DEFAULT_URL = "postgresql://harness:harness-test@127.0.0.1:5432/harness"
WHY = "scripts/services.sh, run as root, starts it (CI runs that script before the tests)"


def missing(what: str) -> None:
    """Skip (fail where CI requires the services) for want of a service."""
    message = f"{what} is not running here; {WHY}"
    if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def needed(module: str):
    """Import a package the cluster tests need (the `cluster` extra); skip without it, fail where CI requires it."""
    try:
        return __import__(module)
    except ImportError:
        message = f"{module} is not installed: pip install -e '.[cluster]'"
        if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message, allow_module_level=True)


def server_url() -> str:
    """The URL of the test server (HARNESS_TEST_POSTGRES or the script's default)."""
    return os.environ.get("HARNESS_TEST_POSTGRES") or DEFAULT_URL


def with_database(url: str, name: str, *, password: bool = True) -> str:
    """The server's URL naming database `name` (without its password where `password` is false)."""
    parts = urlsplit(url)
    netloc = parts.netloc if password else parts.netloc.replace(f":{parts.password}@", "@")
    return urlunsplit(parts._replace(path="/" + name, netloc=netloc))


@contextlib.contextmanager
def scratch_database(admin, url: str, prefix: str):
    """A fresh database `PREFIX_...` on the server `admin` is connected to (autocommit), for the block: its URL,
    password included; dropped after, its connections ended first."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(url, name)
    finally:
        admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        admin.execute(f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture
def pg_url():
    """The URL of a fresh, empty database on the test server, dropped afterwards."""
    psycopg = needed("psycopg")
    url = server_url()
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        missing("the PostgreSQL server")
    with admin, scratch_database(admin, url, "harness_t") as db_url:
        yield db_url


@pytest.fixture
def slurm():
    """A single-node Slurm with an idle node `localhost` (the tests run as a user who may submit)."""
    needed("submitit")
    if shutil.which("sbatch") is None:
        missing("Slurm (sbatch)")
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if "UP" not in ping.stdout:
        missing("slurmctld")
    state = subprocess.run(["sinfo", "-h", "-n", "localhost", "-o", "%T"], capture_output=True, text=True).stdout
    if state.strip().startswith(("drain", "down")):
        subprocess.run(["scontrol", "update", "NodeName=localhost", "State=RESUME"], capture_output=True)
    return "localhost"
