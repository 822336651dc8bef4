"""What a worker is handed: a RunSpec whose measure settings are one typed `Measure` on both sides of the JSON
file, a capacity probe said by the spec itself, and every plan a store holds still read."""

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.seam.runspec import RunSpec
from harness.timing.settings import Measure

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"


def spec(**measure) -> RunSpec:
    return RunSpec(run_id="r", session_id="s", run_key="k", scenario="t", workload="gemm", backend="torch",
                   device="cpu", params={"size": 64}, measure=Measure(**measure), seed=1)


def test_the_spec_file_carries_the_measure_and_the_worker_rebuilds_it_typed():
    planned = spec(steps=7, repeats=3, min_time_s=2.0)
    text = json.dumps(planned.to_dict())
    rebuilt = RunSpec.from_dict(json.loads(text))
    assert rebuilt == planned and isinstance(rebuilt.measure, Measure)
    assert rebuilt.measure.steps == 7 and rebuilt.measure.adaptive and rebuilt.timeout_s == 1800.0
    assert json.loads(text)["measure"] == Measure(steps=7, repeats=3, min_time_s=2.0).model_dump()


def test_a_probe_is_the_specs_and_a_plans_entries_stay_as_they_were():
    plain = spec()
    assert "probe" not in plain.to_dict() and not plain.probe  # a plan's entry: the keys it always had
    probe = replace(plain.with_measure(warmup=0, steps=1), probe=True)
    assert probe.to_dict()["probe"] is True and "probe" not in probe.to_dict()["measure"]
    assert RunSpec.from_dict(probe.to_dict()).probe
    older = {**plain.to_dict(), "measure": {**plain.to_dict()["measure"], "probe": True}}  # as an earlier version
    assert RunSpec.from_dict(older).probe and RunSpec.from_dict(older).measure == plain.measure


def test_measure_settings_given_as_a_mapping_are_validated():
    given = RunSpec(run_id="r", session_id="s", run_key="k", scenario="t", workload="gemm", backend="torch",
                    device="cpu", params={}, measure={"warmup": 0, "steps": 2}, seed=0)
    assert given.measure == Measure(warmup=0, steps=2)
    with pytest.raises(ValidationError):
        replace(given, measure={"warmup": -1})
    with pytest.raises(ValidationError):
        given.with_measure(repeats=0)


def stored_plans():
    for db in sorted(DATA.glob("*.db")):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            for (plan,) in con.execute("SELECT plan FROM sessions"):
                yield from json.loads(plan)


def test_every_planned_run_of_every_published_store_reads_back_as_its_spec():
    entries = list(stored_plans())
    assert len(entries) > 1000
    for entry in entries:
        rebuilt = RunSpec.from_dict(entry)
        given = {k: v for k, v in entry["measure"].items() if v is not None}
        assert {k: v for k, v in rebuilt.measure.model_dump().items() if k in given} == given
        if set(entry["measure"]) == set(Measure.model_fields) and "cpu_threads" in entry:  # this version's shape
            assert rebuilt.to_dict() == {k: v for k, v in entry.items() if k != "capacity"}
