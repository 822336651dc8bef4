"""The record is typed inside and the same row outside: every stored row reads into a `Result` and writes back as
it was, key for key and in its order; a record cannot be changed, only copied with changes."""

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.fields import FrozenDict
from harness.machine.env import Environment
from harness.results.parts import (
    BlockTiming,
    Checks,
    Distributed,
    PhaseSeconds,
    Profile,
    Telemetry,
)
from harness.results.record import FIELDS, RecordError, Result

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"


def stored_rows():
    for db in sorted(DATA.glob("*.db")):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            for (text,) in con.execute("SELECT record FROM results"):
                yield db.name, text


def test_every_record_of_every_published_store_reads_typed_and_writes_back_as_it_was():
    rows = list(stored_rows())
    assert len(rows) > 1000 and len({name for name, _ in rows}) == len(list(DATA.glob("*.db")))
    for name, text in rows:
        row = json.loads(text)
        record = Result.from_dict(row)
        assert isinstance(record.timing, BlockTiming) and isinstance(record.env, Environment)
        assert record.to_dict() == row, name
        assert json.dumps(record.to_dict()) == json.dumps(row), name  # the same keys, in the same order


# JSON values as a record's parts may hold them, keys a newer version might add
_scalars = st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=8)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(min_size=1, max_size=6), inner, max_size=3), max_leaves=8)
_DECLARED = set().union(*(part.model_fields for part in (BlockTiming, Checks, Telemetry, Profile)))
_unknown = st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in _DECLARED), _json, max_size=4)
_figure = st.none() | st.integers(0, 2**40) | st.floats(0, 1e12)


@st.composite
def rows(draw):
    """A row of any version: some fields present, typed figures as ints or floats, unknown keys in the parts and
    beside the fields, in any order."""
    timing = {**draw(_unknown), **draw(st.fixed_dictionaries({}, optional={
        "steps_per_block": st.integers(1, 10**6), "stop_reason": st.sampled_from(["repeats", "min_time"]),
        "block_wall_s": st.lists(_figure, max_size=4), "warmup_s": _figure}))}
    fields = draw(st.fixed_dictionaries({}, optional={
        "status": st.sampled_from(["ok", "failed", "oom"]), "median": _figure, "cv": _figure,
        "samples": st.lists(_figure, max_size=4), "warnings": st.lists(st.text(max_size=10), max_size=3),
        "replicate": st.integers(0, 9), "params": st.dictionaries(st.text(min_size=1, max_size=5), _scalars),
        "checks": _unknown.map(lambda d: {**d, "loss_last": 0.5}), "telemetry": _unknown,
        "profile": _unknown, "phases_s": st.dictionaries(st.sampled_from(["steps", "after", "new_phase"]), _figure),
        "timing": st.just(timing), "env": st.fixed_dictionaries({"hostname": st.text(max_size=5)}, optional={
            "gpus": st.lists(st.fixed_dictionaries({"index": st.integers(0, 7)}, optional={"uuid": st.text()}),
                             max_size=2)})}))
    notes = draw(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in FIELDS), _json, max_size=2))
    row = {"run_id": draw(st.text(min_size=1, max_size=6)), "schema_version": 1, **fields, **notes}
    return dict(draw(st.permutations(list(row.items()))))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(rows())
def test_any_row_read_and_written_again_is_the_row_it_was(row):
    assert Result.from_dict(row).to_dict() == row
    assert Result.from_dict(Result.from_dict(row).to_dict()) == Result.from_dict(row)


def test_a_record_cannot_be_changed_only_copied_with_changes():
    record = Result.from_dict({"run_id": "r", "params": {"batch_size": 8}, "timing": {"stop_reason": "repeats"},
                               "warnings": ["w"]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = "ok"
    with pytest.raises(TypeError):
        record.params["batch_size"] = 16
    with pytest.raises(AttributeError):
        record.warnings.append("another")
    with pytest.raises(Exception):  # a part is frozen too (pydantic's ValidationError)
        record.timing.stop_reason = "min_time"
    changed = record.updated(status="ok", timing=record.timing.updated(stop_reason="min_time")).with_warning("x")
    assert (record.status, record.timing.stop_reason, record.warnings) == (None, "repeats", ("w",))
    assert (changed.status, changed.timing.stop_reason, changed.warnings) == ("ok", "min_time", ("w", "x"))
    noted = record.with_note("log_tail", "...")
    assert noted.note("log_tail") == "..." and record.note("log_tail") is None
    with pytest.raises(KeyError):
        record.with_note("status", "ok")  # a field is no note
    with pytest.raises(TypeError):
        record.updated(no_such_field=1)


def test_a_new_record_writes_every_field_and_a_field_set_on_an_old_one_is_written():
    assert set(Result().to_dict()) == set(FIELDS)
    old = Result.from_dict({"run_id": "r", "schema_version": 1})
    assert old.to_dict() == {"run_id": "r", "schema_version": 1}
    assert old.updated(compile_cache="cold").to_dict() == {"run_id": "r", "schema_version": 1, "compile_cache": "cold"}


def test_a_row_of_the_wrong_type_is_refused_naming_the_field():
    with pytest.raises(RecordError, match=r"record r: field replicate"):
        Result.from_dict({"run_id": "r", "replicate": "first"})
    with pytest.raises(RecordError, match=r"field timing\.steps_per_block"):
        Result.from_dict({"run_id": "r", "timing": {"steps_per_block": "many"}})
    with pytest.raises(RecordError, match=r"field env\.gpus\.0\.index"):
        Result.from_dict({"run_id": "r", "env": {"gpus": [{"index": "zero"}]}})


def test_the_parts_are_typed_and_keep_what_they_do_not_declare():
    record = Result.from_dict({
        "timing": {"block_wall_s": [0.5, 1], "images_per_step": 256.0}, "checks": {"loss_last": 2, "correct": True},
        "telemetry": {"energy_j": 10.5}, "profile": {"classes_s": {"matmul": 0.002}, "idle_s": 0.001},
        "distributed": {"ranks": [{"rank": 0, "status": "ok", "seen": 1}]}, "phases_s": {"steps": 1.5},
        "env": {"framework": {"gpu_memory_bytes": 80}, "variables": {"CUDA_VISIBLE_DEVICES": "3"}}})
    assert record.timing.blocks_s() == 1.5 and record.timing.block_wall_s == (0.5, 1)
    assert isinstance(record.timing.block_wall_s[1], int)  # an int stays an int: written back as it was
    assert record.checks == Checks(loss_last=2, correct=True) and record.telemetry == Telemetry(energy_j=10.5)
    assert record.profile.ms_per_step(("matmul", "conv")) == pytest.approx({"matmul": 2.0, "conv": 0.0, "idle": 1.0})
    assert record.distributed.ranks[0].status == "ok" and record.distributed == Distributed.of(
        {"ranks": [{"rank": 0, "status": "ok", "seen": 1}]})
    assert record.phases_s == PhaseSeconds(steps=1.5) and not Profile()
    assert record.env.variable("CUDA_VISIBLE_DEVICES") == "3" and record.env.framework.gpu_memory_bytes == 80
    assert isinstance(record.params, FrozenDict)


def test_an_import_of_a_row_that_is_no_record_is_refused_naming_the_file_and_field(tmp_path):
    from harness.errors import InputError
    from harness.results.store import read_importable

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"run_id": "r", "session_id": "s", "schema_version": 1, "replicas": "two"}]))
    with pytest.raises(InputError, match=r"bad.json: records\[0\]: record r: field replicas"):
        read_importable(bad)
