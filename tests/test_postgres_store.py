"""The PostgreSQL store against a real server (scripts/services.sh starts one): the same behaviour as the SQLite
store through the real `harness` command and real worker processes, credentials kept out of everything written
or printed, abandoned sessions seen by heartbeat, nothing lost when the server drops the session's connection,
and 8 submitters writing one database at once."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.results.record import Result
from harness.results.store import load_results, open_store, redact, store_exists
from harness.results.store import postgres as pg
from harness.results.store.liveness import process_owner
from harness.results.store.postgres import PostgresStore
from harness.results.store.sidefiles import read_side_file
from tests import services
from tests.test_reliability import _fake_scenario, _wait_for_marker

pg_url = services.pg_url  # the fixture: a fresh database on the test server
psycopg = services.needed("psycopg")

PASSWORD = "harness-test"


def _harness(*args, cwd, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_a_session_runs_into_postgresql_and_reads_back_like_sqlite(tmp_path, fake_backend, write_scenario, pg_url):
    path = _fake_scenario(write_scenario, tmp_path, 4)
    done = _harness("run", path, "--store", pg_url, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with open_store(pg_url) as store:
        assert isinstance(store, PostgresStore)
        rows = store.records()
        sessions = store.sessions()
        session = store.session(sessions[0].session_id)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    assert [r["started_at"] for r in rows] == sorted(r["started_at"] for r in rows)  # in the order they ran
    assert sorted(r["params"]["batch"] for r in rows) == [1, 2, 3, 4]
    assert sessions[0].state == "finished" and sessions[0].results == 4 and sessions[0].ok == 4
    assert len(session.plan) == 4
    # the password is in nothing stored or printed
    assert PASSWORD in pg_url
    assert PASSWORD not in session.command and "--store postgresql://harness@" in session.command
    assert PASSWORD not in done.stdout + done.stderr
    # pandas, exports and compare read it as they read an SQLite store
    frame = load_results(pg_url)
    assert len(frame) == 4 and set(frame["status"]) == {"ok"}
    exported = _harness("results", "--store", pg_url, "--format", "json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert sorted(r["run_id"] for r in json.loads(exported.stdout)) == sorted(r["run_id"] for r in rows)
    compared = _harness("compare", "--store", pg_url, "--by", "batch", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "batch" in compared.stdout
    reported = _harness("report", "--store", pg_url, "-o", str(tmp_path / "rep"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert (tmp_path / "rep" / "report.html").stat().st_size > 0
    assert PASSWORD not in (tmp_path / "rep" / "report.md").read_text()
    assert PASSWORD not in compared.stdout + compared.stderr


def test_an_sqlite_store_imports_into_postgresql_and_back(tmp_path, fake_backend, write_scenario, pg_url):
    path = _fake_scenario(write_scenario, tmp_path, 3)
    db = tmp_path / "local.db"
    assert _harness("run", path, "--store", str(db), "-q", cwd=tmp_path).returncode == 0
    taken = _harness("results", "--import", str(db), "--store", pg_url, cwd=tmp_path)
    assert taken.returncode == 0, taken.stderr
    again = _harness("results", "--import", str(db), "--store", pg_url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    with open_store(pg_url, readonly=True) as server, open_store(db, readonly=True) as local:
        assert sorted(r["run_id"] for r in server.records()) == sorted(r["run_id"] for r in local.records())
        assert [s.session_id for s in server.sessions()] == [s.session_id for s in local.sessions()]
    back = tmp_path / "back.db"
    exported = tmp_path / "all.json"
    out = _harness("results", "--store", pg_url, "--format", "json", cwd=tmp_path)
    exported.write_text(out.stdout)
    assert _harness("results", "--import", str(exported), "--store", str(back), cwd=tmp_path).returncode == 0
    with open_store(back, readonly=True) as store:
        assert len(store.records()) == 3


def test_a_server_url_in_any_case_opens_the_postgresql_store_through_the_registry(pg_url):
    shouted = "POSTGRES" + pg_url[len("postgresql"):]
    assert store_exists(shouted)
    with open_store(shouted) as store:
        assert type(store) is PostgresStore and PASSWORD not in store.path
        assert store.path == redact(pg_url).replace("postgresql://", "postgres://", 1)
        store.begin_session("loud", [], scenario_path=None, command=f"harness run x --store {shouted}")
        with store.reopen() as reader:  # a new connection, with the password the display has not
            assert reader.session("loud").command == f"harness run x --store {redact(shouted)}"
        store.end_session("loud", "finished")
    with open_store(pg_url, readonly=True) as reader:
        assert [s.state for s in reader.sessions()] == ["finished"]


@pytest.mark.parametrize("url, says", [
    ("postgresql://harness:s3cret@127.0.0.1:1/harness", "cannot connect"),
    ("postgresql://harness:s3cret@[::1/harness", "not a valid PostgreSQL URL"),
])
def test_a_refused_connection_or_bad_url_is_one_line_and_exit_2(tmp_path, fake_backend, write_scenario, url, says):
    path = _fake_scenario(write_scenario, tmp_path, 1)
    done = _harness("run", path, "--store", url, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr
    assert not list(tmp_path.glob("*.db"))


def test_wrong_password_is_refused_without_echoing_it(tmp_path, pg_url):
    wrong = pg_url.replace(PASSWORD, "not-the-password")
    with pytest.raises(Exception) as refused:
        open_store(wrong)
    assert "password authentication failed" in str(refused.value)
    assert "not-the-password" not in str(refused.value)


def test_redact_takes_passwords_out_of_urls_and_command_lines():
    assert redact("harness run s.yaml --store postgresql://u:p%40ss@db:5432/h -q") == \
        "harness run s.yaml --store postgresql://u@db:5432/h -q"
    assert redact("postgres://u@db/h?password=x&sslmode=require") == "postgres://u@db/h?sslmode=require"
    assert redact("results.db") == "results.db"


def test_interrupt_then_resume_completes_the_session(tmp_path, fake_backend, write_scenario, pg_url):
    path = _fake_scenario(write_scenario, tmp_path, 4, action="sleep", seconds=0.5)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", pg_url], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "s.marker", 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert PASSWORD not in err
    with open_store(pg_url) as store:
        session = store.sessions()[0]
        assert session.state == "interrupted" and session.results == 2
    # the hint names the store without its password: the password then comes from the environment
    hint = err.split("finish with: ")[1].split()
    assert hint[:3] == ["harness", "run", "--resume"] and PASSWORD not in " ".join(hint)
    bare = hint[hint.index("--store") + 1]
    done = _harness(*hint[1:], cwd=tmp_path, env={"PGPASSWORD": PASSWORD})
    assert done.returncode == 0, done.stderr
    with open_store(pg_url) as store:
        rows = store.records()
        assert store.sessions()[0].state == "finished"
    assert bare.startswith("postgresql://harness@")
    assert len(rows) == 4 and len({r["run_key"] for r in rows}) == 4


def _session(store, session_id, host):
    store.begin_session(session_id, [], scenario_path=None, command="harness run x")
    owner = {**process_owner(), "host": host}
    store._db.execute("UPDATE sessions SET owner = %s WHERE session_id = %s", (json.dumps(owner), session_id))


def test_a_session_whose_heartbeat_stopped_on_another_host_is_abandoned(pg_url):
    with open_store(pg_url) as store:
        _session(store, "stale", "another-host")
        _session(store, "fresh", "another-host")
        store._db.execute("UPDATE sessions SET heartbeat = now() - interval '1 hour' WHERE session_id = 'stale'")
        store._heartbeat.sessions.clear()  # this process stands in for submitters elsewhere
    with open_store(pg_url) as store:
        assert store.abandoned == ["stale"]
        states = {s.session_id: s.state for s in store.sessions()}
    assert states == {"stale": "abandoned", "fresh": "running"}


def test_a_session_another_host_still_runs_is_not_resumed_twice(tmp_path, pg_url):
    with open_store(pg_url) as store:
        _session(store, "busy", "another-host")
        store._heartbeat.sessions.clear()
    resumed = _harness("run", "--resume", "busy", "--store", pg_url, cwd=tmp_path)
    assert resumed.returncode == 2, resumed.stderr
    assert "still running on another-host" in resumed.stderr and PASSWORD not in resumed.stderr
    with open_store(pg_url) as store:  # once its heartbeat is old, the session is abandoned and can be taken
        store._db.execute("UPDATE sessions SET heartbeat = now() - interval '1 hour'")
        store.reopen_session("busy")
        assert store.session("busy").state == "running"
        store.end_session("busy", "interrupted")


def test_the_heartbeat_moves_while_a_session_runs(pg_url, monkeypatch):
    monkeypatch.setattr(pg, "HEARTBEAT_S", 0.2)
    with open_store(pg_url) as store:
        _session(store, "s1", "another-host")
        store._db.execute("UPDATE sessions SET heartbeat = now() - interval '1 hour'")
        time.sleep(1.0)
        age = store._db.execute("SELECT extract(epoch FROM now() - heartbeat) FROM sessions").fetchone()[0]
        store.end_session("s1", "finished")
    assert float(age) < 5


def test_a_dropped_connection_keeps_every_result_in_a_side_file_taken_in_next_run(
        tmp_path, fake_backend, write_scenario, pg_url, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = Result(run_id="r1", session_id="s", run_key="k", status="ok", started_at="2026-01-01T00:00:00")
    store = open_store(pg_url)
    store.begin_session("s", [], scenario_path=None, command="harness run x")
    store.add(spec)
    with psycopg.connect(pg_url, autocommit=True) as admin:  # the server ends the session's connection
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'harness'"
                      " AND datname = current_database() AND pid <> pg_backend_pid()")
    with pytest.raises(Exception) as failed:
        store.add(spec.updated(run_id="r2"))
    store._heartbeat.stop()
    assert "Nothing measured is lost" in str(failed.value) and PASSWORD not in str(failed.value)
    kept = read_side_file(open(failed.value.kept_in).read())
    assert [r["run_id"] for r in kept["records"]] == ["r1", "r2"]
    # the process that kept them ends, as a session whose store failed does (a live one's file is its journal)
    kept["owner"] = {**(kept.get("owner") or {}), "pid": 2**22 + 12345}
    with open(failed.value.kept_in, "w", encoding="utf-8") as fh:
        json.dump(kept, fh)
    # the next run into the store takes the side file in first
    path = _fake_scenario(write_scenario, tmp_path, 1)
    done = _harness("run", path, "--store", pg_url, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "took in 1 result(s)" in done.stderr
    with open_store(pg_url, readonly=True) as reader:
        assert {"r1", "r2"} <= {r["run_id"] for r in reader.records()}


def test_eight_submitters_write_one_database_at_once(tmp_path, fake_backend, write_scenario, pg_url):
    actions = ["ok", "raise", "ok", "exit", "ok", "ok", "raise", "ok"]
    paths = [_fake_scenario(write_scenario, tmp_path, 6, action=a, name=f"w{i}") for i, a in enumerate(actions)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda p: _harness("run", p, "--store", pg_url, "-q", cwd=tmp_path), paths))
    assert [r.returncode for r in results] == [0 if a == "ok" else 1 for a in actions], \
        [r.stderr[-500:] for r in results]
    with open_store(pg_url, readonly=True) as store:
        rows = store.records()
        sessions = store.sessions()
    assert len(rows) == 48 and len({r["run_id"] for r in rows}) == 48  # nothing lost, no duplicate
    assert len(sessions) == 8 and {s.state for s in sessions} == {"finished"}
    assert sorted(s.results for s in sessions) == [6] * 8
    for row in rows:  # every status right: each scenario's own
        assert row["status"] == ("ok" if actions[int(row["scenario"][1:])] == "ok" else "failed"), row["error"]
