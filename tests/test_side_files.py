"""A side file (a session's journal, or the results a store could not take) is JSON lines: a result added is one
line appended and fsynced, not the whole file written again, and a line a crash cut short is left out when it is
read back, where whole files of the earlier single-object form still read and import."""

import json
import os

import pytest

from harness.errors import InputError
from harness.results.store import sidefiles
from harness.results.store.imports import read_rows
from harness.results.store.sidefiles import Unsaved, read_side_file

PLAN = [{"run_key": f"k{i}", "backend": "torch"} for i in range(50)]


def _record(i: int) -> dict:
    return {"run_id": f"r{i}", "session_id": "s1", "schema_version": 1, "median": float(i)}


def _kept(tmp_path, n: int) -> Unsaved:
    kept = Unsaved(str(tmp_path / "store.db"))
    kept.sessions["s1"] = {"session_id": "s1", "plan": PLAN}
    for i in range(n):
        kept.records.append(_record(i))
        assert kept.write() is not None
    return kept


def test_each_result_is_appended_leaving_what_the_file_held_untouched(tmp_path, monkeypatch):
    kept = _kept(tmp_path, 3)
    before = open(kept.path, "rb").read()
    rewrites = []
    monkeypatch.setattr(sidefiles, "write_atomic", lambda *a: rewrites.append(a) or False)
    kept.records.append(_record(3))
    assert kept.write() == kept.path and rewrites == []  # appended: no whole file written
    after = open(kept.path, "rb").read()
    assert after.startswith(before) and after[len(before):].decode().count("\n") == 1
    lines = after.decode().splitlines()
    assert json.loads(lines[0])["harness_unsaved"] == 2 and len(json.loads(lines[0])["sessions"][0]["plan"]) == 50
    assert [json.loads(line)["run_id"] for line in lines[1:]] == ["r0", "r1", "r2", "r3"]


def test_a_changed_first_line_or_a_file_made_again_writes_the_whole_file(tmp_path):
    kept = _kept(tmp_path, 2)
    kept.records.append(_record(2))
    kept.write("the store refused it")  # an error to say: the first line changes, the whole file is written
    doc = read_side_file(open(kept.path).read())
    assert doc["error"] == "the store refused it" and [r["run_id"] for r in doc["records"]] == ["r0", "r1", "r2"]
    os.unlink(kept.path)  # removed under it: the next write is a whole file again, never records without a head
    kept.records.append(_record(3))
    kept.write("the store refused it")
    assert len(read_side_file(open(kept.path).read())["records"]) == 4


def test_an_append_that_fails_leaves_no_partial_line(tmp_path, monkeypatch):
    kept = _kept(tmp_path, 2)
    before = open(kept.path, "rb").read()
    monkeypatch.setattr(sidefiles.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left")))
    kept.records.append(_record(2))
    assert kept.write() is None  # neither the append nor a whole file could be written anywhere
    assert open(kept.path, "rb").read() == before  # cut back to the whole lines it held


def test_a_line_cut_short_by_a_crash_is_left_out_and_a_damaged_middle_line_refused(tmp_path):
    kept = _kept(tmp_path, 3)
    with open(kept.path, "a", encoding="utf-8") as fh:
        fh.write('{"run_id": "r3", "session_id": "s1", "sch')  # killed in mid-append
    rows, sessions, unreadable = read_rows(kept.path)
    assert [r["run_id"] for r in rows] == ["r0", "r1", "r2"] and sessions[0]["session_id"] == "s1"
    lines = open(kept.path).read().splitlines()
    lines[2] = lines[2][:10]
    (tmp_path / "damaged.json").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="damaged.json: not JSON"):
        read_rows(tmp_path / "damaged.json")


def test_a_side_file_an_earlier_version_wrote_still_reads(tmp_path):
    earlier = {"harness_unsaved": 1, "store": str(tmp_path / "store.db"), "error": "disk full", "owner": None,
               "sessions": [], "records": [_record(0), _record(1)]}
    path = tmp_path / "store.db.unsaved-s1-20261205T000000-1.json"
    path.write_text(json.dumps(earlier))
    assert [r["run_id"] for r in read_rows(path)[0]] == ["r0", "r1"]
    path.write_text(json.dumps(earlier, indent=2))  # over several lines
    assert read_side_file(path.read_text())["error"] == "disk full"
    path.write_text(json.dumps({**earlier, "harness_unsaved": 2}))  # this version's, read and written back whole
    assert [r["run_id"] for r in read_rows(path)[0]] == ["r0", "r1"]
