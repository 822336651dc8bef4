"""The journal of a session into a PostgreSQL database, against a real server: named as the database's side files
are (`postgresql-HOST-PORT-DB.unsaved-...json` in the working folder), so a result held only there (the submitter
killed while its INSERT waited) is taken in by `--resume`, not measured again, and not taken in twice; and a
database that holds other tables is not made a store unless the user says so."""

import os
import signal
import subprocess
import sys
import time

from harness.results.store import open_store
from harness.results.store.sidefiles import read_side_file, side_file_base
from tests import services
from tests.test_reliability import _fake_scenario, _wait_for_marker

pg_url = services.pg_url  # the fixture: a fresh database on the test server
psycopg = services.needed("psycopg")


def _harness(*args, cwd):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _journal_with(folder, count, timeout=60):
    """The journal in `folder` once it holds `count` results."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in folder.glob("*.unsaved-*.json"):
            try:
                if len(read_side_file(path.read_text())["records"]) >= count:
                    return path
            except (ValueError, KeyError, OSError):
                pass  # being replaced
        time.sleep(0.05)
    raise AssertionError(f"no journal in {folder} reached {count} result(s): {sorted(os.listdir(folder))}")


def test_the_journal_of_a_database_store_is_named_from_its_identity_without_the_password(pg_url, monkeypatch,
                                                                                          tmp_path):
    monkeypatch.chdir(tmp_path)
    with open_store(pg_url) as store:
        base = side_file_base(store)
    db = pg_url.rsplit("/", 1)[1]
    assert base == str(tmp_path / f"postgresql-127.0.0.1-5432-{db}")
    assert "harness-test" not in base and "://" not in base


def test_a_result_only_in_the_journal_is_taken_in_by_resume_not_measured_again(
        tmp_path, fake_backend, write_scenario, pg_url):
    with open_store(pg_url):
        pass  # the tables, so the lock below has a table to hold
    path = _fake_scenario(write_scenario, tmp_path, 3)
    with psycopg.connect(pg_url) as blocker:  # holds every INSERT into results until it ends
        blocker.execute("LOCK TABLE results IN SHARE MODE")
        proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", pg_url], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            journal = _journal_with(tmp_path, 1)  # the first result is in the journal, its INSERT waits
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        # the server ends the killed submitter's connection, whose INSERT would otherwise go on once the lock goes
        blocker.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'harness'"
                        " AND datname = current_database() AND pid <> pg_backend_pid()")
        blocker.rollback()
    assert journal.name.startswith("postgresql-127.0.0.1-5432-harness_t_") and "harness-test" not in journal.name
    assert [p.name for p in tmp_path.glob("harness_t_*")] == []  # nothing named after the URL as a path
    kept = read_side_file(journal.read_text())
    session_id, measured = kept["sessions"][0]["session_id"], kept["records"][0]
    started = len((tmp_path / "s.marker").read_text().split())
    with open_store(pg_url, readonly=True) as reader:
        assert reader.records() == []
    copy = tmp_path / "copy-of-journal.json"
    copy.write_text(journal.read_text())

    resumed = _harness("run", "--resume", session_id, "--store", pg_url, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 of 3 run(s) have no ok result" in resumed.stdout + resumed.stderr
    assert "took in 1 result(s)" in resumed.stderr
    _wait_for_marker(tmp_path / "s.marker", started + 2)
    assert len((tmp_path / "s.marker").read_text().split()) == started + 2  # only the two without a result ran
    again = _harness("results", "--import", str(copy), "--store", pg_url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    with open_store(pg_url, readonly=True) as reader:
        rows = reader.records()
        state = reader.session(session_id).state
    assert len(rows) == 3 and len({r["run_key"] for r in rows}) == 3 and state == "finished"
    assert measured["run_id"] in {r["run_id"] for r in rows}
    assert not journal.exists()


def test_a_database_holding_other_tables_is_refused_unless_told(tmp_path, fake_backend, write_scenario, pg_url):
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    path = _fake_scenario(write_scenario, tmp_path, 1)
    refused = _harness("run", path, "--store", pg_url, "-q", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "holds other tables (invoices) and no harness store" in line and "HARNESS_STORE_INIT=1" in line
    assert "harness-test" not in line
    with psycopg.connect(pg_url, autocommit=True) as admin:  # nothing was created
        tables = [r[0] for r in admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    assert tables == ["invoices"]
    told = subprocess.run([sys.executable, "-m", "harness", "run", path, "--store", pg_url, "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HARNESS_STORE_INIT": "1"})
    assert told.returncode == 0, told.stderr
    again = _harness("run", path, "--store", pg_url, "-q", cwd=tmp_path)  # a harness store now: no need to tell
    assert again.returncode == 0, again.stderr
    with open_store(pg_url, readonly=True) as reader:
        assert len(reader.records()) == 2
