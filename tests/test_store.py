"""harness.results.store, driven directly: results added and read back typed, sessions and their owners,
a side file written when the store cannot take a result and imported again, a JSON export imported,
a damaged store refused and salvaged row by row, pandas frames, stores written by earlier versions."""

import json
import math
import os
import platform
import random
import sqlite3
import subprocess
import sys

import pytest

from harness.errors import InputError, StoreError, StoreWriteError
from harness.results.record import FIELDS, Result
from harness.results.sessions import SessionSettings, StoredSession
from harness.results.store import (
    SIDE_MARK,
    explain,
    load_results,
    open_store,
    owner_alive,
    process_owner,
    read_importable,
    records_frame,
)
from harness.results.store.exports import export_text
from harness.results.store.sidefiles import read_side_file
from tests.specs import planned


def _result(i: int, session: str = "s1", **fields) -> Result:
    """A finished run's record; `fields` replace its figures."""
    return Result(run_id=f"r{i}", session_id=session, run_key=f"k{i % 3}", scenario="sc", workload="gemm",
                  backend="torch", device="cpu", status="ok", metric="tflops", median=float(i + 1),
                  samples=[float(i + 1)] * 3, replicate=i // 3, started_at=f"2026-11-30T00:00:{i:02d}",
                  params={"batch": i}).updated(**fields)


def _filled(path, n: int = 6, session: str = "s1") -> list[Result]:
    results = [_result(i, session) for i in range(n)]
    with open_store(path) as store:
        store.begin_session(session, [planned(r.run_key) for r in results], scenario_path="sc.yaml",
                            command="harness run sc.yaml", settings=SessionSettings(timeout_s=5))
        for r in results:
            store.add(r)
        store.end_session(session, "finished")
    return results


# --------------------------------------------------------------------------- add and read back
def test_results_added_are_read_back_typed_and_as_the_rows_stored(tmp_path):
    results = _filled(tmp_path / "a.db")
    with open_store(tmp_path / "a.db", readonly=True) as store:
        typed = store.results()
        rows = store.records()
        assert store.results(["nope"]) == []
    assert all(isinstance(r, Result) for r in typed)
    assert typed == results  # oldest first, every field as added
    assert rows == [r.to_dict() for r in results] and list(rows[0]) == list(FIELDS)


def test_a_figure_that_is_not_finite_is_stored_as_null(tmp_path):
    with open_store(tmp_path / "n.db") as store:
        store.add(_result(0, median=None, cv=math.nan, samples=[1.0, math.inf]))
        (row,) = store.records()
        (typed,) = store.results()
    assert row["cv"] is None and row["samples"] == [1.0, None] and typed.cv is None


def test_a_run_stored_again_replaces_its_row(tmp_path):
    with open_store(tmp_path / "r.db") as store:
        store.add(_result(0, status="failed"))
        store.add(_result(0))
        assert [r.status for r in store.results()] == ["ok"]


def test_a_newer_versions_fields_are_kept_through_an_import(tmp_path):
    row = {**_result(0).to_dict(), "from_the_future": {"x": 1}}
    (tmp_path / "new.json").write_text(json.dumps([row]))
    with open_store(tmp_path / "i.db") as store:
        store.import_file(tmp_path / "new.json")
        (typed,) = store.results()
        (stored,) = store.records()
    assert typed.extra == {"from_the_future": {"x": 1}} and stored == row


def test_an_earlier_versions_record_is_imported_as_it_was_and_read_with_defaults(tmp_path):
    row = {"schema_version": 1, "run_id": "old", "session_id": "s", "status": "ok", "median": 3.0}
    (tmp_path / "old.json").write_text(json.dumps([row]))
    (typed,), _, _ = read_importable(tmp_path / "old.json")
    assert typed.median == 3.0 and typed.replicas == 1 and typed.samples == () and not typed.timing
    assert typed.to_dict() == row  # read and written again: the row it was, no default added
    with open_store(tmp_path / "i.db") as store:
        store.import_file(tmp_path / "old.json")
        assert store.records() == [row] and store.results() == [typed]  # no field added to what it stored


# --------------------------------------------------------------------------- sessions
def test_a_session_keeps_its_plan_settings_owner_and_state(tmp_path):
    db = tmp_path / "s.db"
    _filled(db)
    with open_store(db) as store:
        session = store.session("s1")
        assert session.plan[0] == planned("k0").to_dict() and session.entries()[0] == planned("k0")
        assert session.settings == SessionSettings(timeout_s=5) and "memory_limit" not in session.settings
        assert session.state == "finished" and session.command == "harness run sc.yaml"
        assert session.owner.pid == os.getpid() and session.owner.host == platform.node()
        (listed,) = store.sessions()
        assert (listed.results, listed.ok) == (6, 6)
        store.reopen_session("s1")
        assert store.session("s1").state == "running" and store.session("s1").finished_at is None
        assert store.ok_run_keys("s1") == {"k0", "k1", "k2"}
        assert store.ok_medians("k0") == [1.0, 4.0]
        assert sorted(store.ok_results("s1")) == [("k0", 0), ("k0", 1), ("k1", 0), ("k1", 1), ("k2", 0), ("k2", 1)]


def test_a_session_is_found_by_its_id_or_a_unique_literal_prefix(tmp_path):
    db = tmp_path / "p.db"
    with open_store(db) as store:
        for sid in ("abc1", "abc2", "x_y"):
            store.begin_session(sid, [], scenario_path=None, command="c")
        assert store.find_sessions("abc1") == ["abc1"] and store.find_sessions("abc") == ["abc1", "abc2"]
        assert store.find_sessions("x%") == [] and store.find_sessions("x_") == ["x_y"] and store.find_sessions("") == []
        assert store.session("abc") is None and store.session("x").session_id == "x_y"
        assert store.resolve_session("abc2") == "abc2"
        with pytest.raises(InputError) as ambiguous:
            store.resolve_session("abc")
        assert ambiguous.value.field == "--session"
        with pytest.raises(InputError) as unknown:
            store.resolve_session("zz")
        assert unknown.value.field == "--session" and unknown.value.source == str(db)


def test_a_session_known_only_by_imported_records_is_resolved_from_them(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps([_result(0, session="lonely").to_dict()]))
    with open_store(tmp_path / "o.db") as store:
        store.import_file(tmp_path / "r.json")
        assert store.sessions() == [] and store.resolve_session("lon") == "lonely"


# --------------------------------------------------------------------------- owners
def test_the_owner_of_a_session_is_alive_while_its_process_runs():
    me = process_owner()
    assert owner_alive(me) is True
    assert owner_alive({**me, "host": me["host"] + "-elsewhere"}) is None  # another machine: cannot tell
    assert owner_alive({**me, "pid": 0}) is None and owner_alive("not an owner") is None
    if me["start"] is not None:
        assert owner_alive({**me, "start": me["start"] + 1}) is False  # the pid was reused by another process
    if me["boot"] is not None:
        assert owner_alive({**me, "boot": "another-boot"}) is False  # the machine has restarted since


def test_a_session_whose_process_ended_is_marked_abandoned_when_the_store_is_opened_to_write(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    gone = process_owner(child.pid)
    child.wait()
    assert owner_alive(gone) is False
    db = tmp_path / "ab.db"
    with open_store(db) as store:
        store.begin_session("dead", [], scenario_path=None, command="c")
        store.begin_session("live", [], scenario_path=None, command="c")
        store._db.execute("UPDATE sessions SET owner=? WHERE session_id='dead'", (json.dumps(gone),))
    with open_store(db, readonly=True) as store:  # reading changes nothing
        assert store.abandoned == [] and store.session("dead").state == "running"
    with open_store(db) as store:
        assert store.abandoned == ["dead"]
        assert {s.session_id: s.state for s in store.sessions()} == {"dead": "abandoned", "live": "running"}


# --------------------------------------------------------------------------- side files and imports
class _FullDisk:
    """A connection whose inserts of results fail as SQLite fails on a full disk."""

    def __init__(self, db):
        self._db = db

    def execute(self, sql, *args):
        if sql.lstrip().startswith("INSERT OR REPLACE INTO results"):
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_a_result_the_store_cannot_take_is_kept_in_a_side_file_and_imported_typed(tmp_path):
    db = tmp_path / "f.db"
    with open_store(db) as store:
        store.begin_session("s1", [planned("k0"), planned("k1")], scenario_path=None, command="c")
        store.add(_result(0))
        store._db = _FullDisk(store._db)
        with pytest.raises(StoreWriteError) as failed:
            store.add(_result(1))
        store._db = store._db._db
        side = failed.value.kept_in
        assert side == store.side_file and store.side_files() == [tmp_path / os.path.basename(side)]
    assert os.path.basename(side).startswith(f"f.db{SIDE_MARK}s1-") and "disk is full" in str(failed.value)
    doc = read_side_file(open(side, encoding="utf-8").read())
    assert doc["records"] == [_result(0).to_dict(), _result(1).to_dict()]  # every record this process added
    assert [s["session_id"] for s in doc["sessions"]] == ["s1"] and len(doc["sessions"][0]["plan"]) == 2
    records, sessions, unreadable = read_importable(side)
    assert records == [_result(0), _result(1)] and all(isinstance(r, Result) for r in records)
    assert [s["session_id"] for s in sessions] == ["s1"] and unreadable == 0
    with open_store(db) as store:
        counts = store.import_file(side)
        assert counts == {"records": 2, "new": 1, "sessions": 1, "new_sessions": 0, "unreadable": 0}
        assert store.results() == [_result(0), _result(1)]
    with open_store(tmp_path / "elsewhere.db") as other:
        other.import_file(side)
        assert other.session("s1").state == "interrupted"  # left running by the process that wrote it


def test_a_json_export_is_imported_into_another_store_as_it_was(tmp_path):
    results = _filled(tmp_path / "a.db")
    with open_store(tmp_path / "a.db", readonly=True) as store:
        exported = export_text(store.records(), "json")
    (tmp_path / "a.json").write_text(exported)
    records, sessions, unreadable = read_importable(tmp_path / "a.json")
    assert records == results and sessions == [] and unreadable == 0
    with open_store(tmp_path / "b.db") as store:
        assert store.import_file(tmp_path / "a.json")["new"] == 6
        assert store.import_file(tmp_path / "a.json")["new"] == 0  # present already: left as it was
        assert export_text(store.records(), "json") == exported


@pytest.mark.parametrize("content, field", [
    ('[{"run_id": "x", "session_id": "s", "schema_version": true}]', "records[0].schema_version"),
    ('[{"run_id": "x", "schema_version": 1}]', "records[0].session_id"),
    ('[3]', "records[0]"),
    ('{"records": [], "sessions": 3}', "sessions"),
    ('{"records": [], "sessions": [{"session_id": "s", "plan": 3}]}', "sessions[0].plan"),
])
def test_a_file_that_is_not_importable_is_refused_naming_its_field(tmp_path, content, field):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(InputError) as refused:
        read_importable(tmp_path / "bad.json")
    assert refused.value.field == field and refused.value.source == str(tmp_path / "bad.json")
    with pytest.raises(InputError) as missing:
        read_importable(tmp_path / "none.json")
    assert missing.value.field == "--import"


# --------------------------------------------------------------------------- damaged stores
def test_a_damaged_store_is_refused_untouched_and_what_it_still_holds_is_salvaged(tmp_path):
    db = tmp_path / "d.db"
    with open_store(db) as store:
        store.begin_session("olds", [], scenario_path=None, command="c")
        for i in range(150):
            store.add(Result(run_id=f"old{i}", session_id="olds", run_key=f"k{i}", status="ok",
                             started_at=f"2026-11-30T00:00:{i % 60:02d}", median=float(i), env={"pad": "e" * 1500}))
    with open(db, "r+b") as fh:
        fh.seek(db.stat().st_size // 4096 // 2 * 4096)
        fh.write(random.Random(2).randbytes(4096))
    before = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(StoreError) as refused:
            open_store(db, readonly=readonly)
        assert "damaged" in str(refused.value) and refused.value.field == "--store"
    records, sessions, unreadable = read_importable(db)
    assert 100 <= len(records) < 150 and all(isinstance(r, Result) and r.session_id == "olds" for r in records)
    assert [s["session_id"] for s in sessions] == ["olds"] and unreadable >= 0
    with open_store(tmp_path / "new.db") as store:
        assert store.import_file(db)["new"] == len(records)
    assert db.read_bytes() == before


def test_a_log_left_beside_a_deleted_store_is_moved_aside_never_replayed_into_the_new_one(tmp_path, capsys):
    # as after `kill -9` of a session then `rm h.db`: the -wal and -shm stay, holding frames of the old store
    db = tmp_path / "h.db"
    with open_store(db) as store:
        store.begin_session("old", [], scenario_path=None, command="c")
        for i in range(40):
            store.add(Result(run_id=f"old{i}", session_id="old", run_key=f"k{i}", status="ok", env={"pad": "e" * 3000}))
        left = {suffix: (tmp_path / f"h.db{suffix}").read_bytes() for suffix in ("-wal", "-shm")}
    assert len(left["-wal"]) > 4096  # frames, not only a header
    db.unlink()
    for suffix, data in left.items():
        (tmp_path / f"h.db{suffix}").write_bytes(data)
    with open_store(db) as store:  # before: "store h.db is damaged (PRAGMA quick_check: Page N is never used)"
        store.add(_result(1, "new"))
    said = capsys.readouterr().err
    aside = sorted(p.name for p in tmp_path.glob("h.db-*.orphaned-*"))
    assert [name.split(".orphaned-")[0] for name in aside] == ["h.db-shm", "h.db-wal"]
    assert all(name in said for name in aside) and said.count("\n") == 1
    assert (tmp_path / aside[1]).read_bytes() == left["-wal"]  # kept as it was, for whoever wants it
    with open_store(db, readonly=True) as store:
        assert [r.run_id for r in store.results()] == ["r1"]


def test_a_file_that_is_not_a_store_is_refused_in_words(tmp_path):
    (tmp_path / "text.db").write_bytes(b"not a database" * 400)
    with pytest.raises(StoreError) as refused:
        open_store(tmp_path / "text.db")
    assert "not an SQLite database" in str(refused.value)
    assert explain(sqlite3.OperationalError("database or disk is full")).startswith("the disk is full")
    with pytest.raises(StoreError):
        open_store(tmp_path / "missing.db", readonly=True)


# --------------------------------------------------------------------------- earlier stores, pandas
def test_a_store_of_an_earlier_version_reads_the_same_and_gains_the_session_columns(tmp_path):
    db = tmp_path / "old.db"
    old = sqlite3.connect(db)
    old.execute("CREATE TABLE results (run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, run_key TEXT,"
                " schema_version INTEGER NOT NULL, scenario TEXT, workload TEXT, backend TEXT, device TEXT, status TEXT,"
                " metric TEXT, median REAL, started_at TEXT, record TEXT NOT NULL)")
    old.execute("CREATE TABLE sessions (session_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, finished_at TEXT,"
                " state TEXT NOT NULL, scenario_path TEXT, command TEXT, plan TEXT NOT NULL)")
    row = {"schema_version": 1, "run_id": "r", "session_id": "s", "status": "ok", "median": 2.0}  # fields of then
    old.execute("INSERT INTO results (run_id, session_id, schema_version, status, median, record) VALUES (?,?,?,?,?,?)",
                ("r", "s", 1, "ok", 2.0, json.dumps(row)))
    old.execute("INSERT INTO sessions VALUES ('s', '2026-01-01', NULL, 'finished', NULL, 'c', '[]')")
    old.commit()
    old.close()
    with open_store(db, readonly=True) as store:
        assert store.records() == [row] and not store.session("s").settings
        (typed,) = store.results()
    assert typed.median == 2.0 and typed.replicas == 1  # a field it lacks takes its default
    with open_store(db) as store:
        assert store.session("s").owner is None
    assert {"settings", "owner"} <= {r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(sessions)")}


def test_records_frame_takes_results_or_rows_and_load_results_reads_a_store(tmp_path):
    results = _filled(tmp_path / "a.db")
    typed = records_frame(results)
    assert list(typed.columns) == list(FIELDS) and len(typed) == 6
    assert records_frame([r.to_dict() for r in results]).equals(typed)
    assert list(records_frame([]).columns) == list(FIELDS)
    frame = load_results(tmp_path / "a.db", session="s1")
    assert frame["run_id"].tolist() == [r.run_id for r in results]
    with pytest.raises(InputError):
        load_results(tmp_path / "none.db")


# --------------------------------------------------------------------------- record accessors
def test_a_records_gpu_size_failing_status_and_probe_are_read_from_the_record():
    env = {"variables": {"CUDA_VISIBLE_DEVICES": "3,2"}, "gpus": [{"index": 2, "memory_total_bytes": 80 * 2**30}],
           "framework": {"gpu_multiprocessors": 132}}
    for device in ("cuda:0", "cpu", "cuda:x", None):  # NVML's GPU 3, no GPU, no index: memory unknown
        assert Result(device=device, env=env).gpu_size() == {"memory_bytes": None, "sm_count": 132}
    assert Result(device="cuda:1", env=env).gpu_size() == {"memory_bytes": 80 * 2**30, "sm_count": 132}
    assert Result(env={"framework": {"gpu_memory_bytes": 5}}).gpu_size() == {"memory_bytes": 5, "sm_count": None}
    assert Result(status="oom").failing and not Result(status="unsupported").failing
    probe = Result(run_id="p").as_probe_of("cap1")
    assert probe.probe_of == "cap1" and probe.to_dict()["probe_of"] == "cap1" and Result().probe_of is None
    assert Result.from_dict(probe.to_dict()).probe_of == "cap1" and "probe_of" not in Result().to_dict()


def test_the_journal_of_a_running_session_is_not_taken_in_and_that_of_an_ended_one_is(tmp_path):
    from harness.results.store import process_owner

    db = tmp_path / "j.db"
    open_store(db).close()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        journal = tmp_path / "j.db.unsaved-s1-20261201T000000-1.json"
        journal.write_text(json.dumps({"harness_unsaved": 1, "owner": process_owner(other.pid), "sessions": [],
                                       "records": []}))
        with open_store(db) as store:
            assert store.side_files() == []  # another session's, still being written
    finally:
        other.kill()
        other.wait()
    with open_store(db) as store:
        assert store.side_files() == [journal]  # its process ended: take it in


def test_a_journal_is_removed_once_every_result_reads_back_and_kept_otherwise(tmp_path):
    from harness.session.journal import Journal

    db = tmp_path / "j.db"
    store = open_store(db)
    store.begin_session("s1", [], scenario_path=None, command="test")
    journal = Journal(store, StoredSession("s1", state="running"))
    records = [Result(run_id=f"r{i}", session_id="s1", run_key=f"k{i}", status="ok") for i in range(3)]
    for record in records[:2]:
        journal.add(record)
    kept = read_side_file(open(journal.file, encoding="utf-8").read())
    assert [r["run_id"] for r in kept["records"]] == ["r0", "r1"]  # durable before the store has it
    journal._kept.records.append(dict(kept["records"][0], run_id="r2"))  # one the store never got
    store.close()
    error = journal.settle("finished", None)
    assert error is not None and "1 of the 3 result(s)" in str(error) and error.kept_in == journal.file
    assert os.path.exists(journal.file)
    journal._kept.records.pop()
    assert journal.settle("finished", None) is None and not os.path.exists(journal.file)


def test_an_interrupt_whose_handler_runs_inside_a_journal_add_waits_until_the_store_has_the_result(tmp_path):
    """Python runs a signal's handler at a bytecode boundary after the signal arrived: one that arrived just
    before `add` ran its handler between the journal and the store (seen once in CI: a capacity session
    interrupted there ended with 'cannot be read back' and exit 1, not 130). The handler in force during
    `add` only notes the signal, and the session's handler gets it once the store has the result."""
    import signal

    from harness.session.interrupt import Interrupted, trap_signals
    from harness.session.journal import Journal

    store = open_store(tmp_path / "i.db")
    store.begin_session("s1", [], scenario_path=None, command="test")
    journal = Journal(store, StoredSession("s1", state="running"))
    real_add, seen = store.add, []

    def add_after_a_pending_handler(result):
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # what Python does with a signal that arrived earlier
        seen.append(result.run_id)
        real_add(result)

    store.add = add_after_a_pending_handler
    outside = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a job started in the background
    with trap_signals():
        with pytest.raises(Interrupted):
            journal.add(Result(run_id="r0", session_id="s1", run_key="k0", status="ok"))
    assert seen == ["r0"] and [r["run_id"] for r in store.records(["s1"])] == ["r0"]
    assert signal.getsignal(signal.SIGINT) == outside  # the handler before the session's is back
    store.close()
    assert journal.settle("finished", None) is None


def test_a_journal_no_folder_takes_still_says_what_the_store_lost(tmp_path, monkeypatch, capsys):
    from harness.results.store import sidefiles
    from harness.session.journal import Journal

    store = open_store(tmp_path / "n.db")
    journal = Journal(store, StoredSession("s1", state="running"))
    monkeypatch.setattr(sidefiles, "write_atomic", lambda path, text: False)  # no folder takes a file
    monkeypatch.setattr(store, "add", lambda result: None)  # a store that loses what it is given
    journal.add(Result(run_id="r0", session_id="s1", run_key="k0", status="ok"))
    store.close()
    error = journal.settle("finished", None)
    assert error is not None and error.kept_in is None and "printed on standard error" in str(error)
    assert '"run_id": "r0"' in capsys.readouterr().err


@pytest.mark.parametrize("field, value, expected", [("params", [1, 2], "valid dictionary"),
                                                    ("samples", "abc", "valid tuple")])
def test_an_imported_record_of_the_wrong_shape_is_refused_and_nothing_is_taken_in(tmp_path, field, value, expected):
    from click.testing import CliRunner

    from harness.cli import main
    record = {**Result.planned(planned("k0").spec).to_dict(), "status": "ok", field: value}
    (tmp_path / "bad.json").write_text(json.dumps({"records": [record]}))
    out = CliRunner().invoke(main, ["results", "--import", str(tmp_path / "bad.json"), "--store",
                                    str(tmp_path / "s.db")])
    assert out.exit_code == 2 and f"field {field}: Input should be a {expected}" in out.output, out.output
    assert "Traceback" not in out.output and not (tmp_path / "s.db").exists()
