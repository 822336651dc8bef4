"""The command line: exit codes, no framework imported where none is needed, exports."""

import csv
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.results.record import Result
from harness.results.store import open_store
from harness.session.limits import MIN_MEMORY_LIMIT, parse_size
from harness.timing.settings import Measure

#: One worker process per configuration (measure.processes, where this harness has it): these tests
#: count runs, and replicates are not what they test.
ONE_PROCESS = {"processes": 1} if "processes" in Measure.model_fields else {}

FRAMEWORKS = ("torch", "tensorflow", "keras", "torchvision", "jax")


def _modules_after(args):
    code = (
        "import sys\nfrom harness.cli import main\n"
        f"try:\n    main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = [l for l in out.stdout.splitlines() if l.startswith("LOADED")]
    assert line, out.stderr
    return line[0]


@pytest.mark.parametrize("args", [["--help"], ["validate", "scenarios/gemm.yaml"], ["list"], ["run", "scenarios/gemm.yaml", "--dry-run"]])
def test_help_validate_list_and_dry_run_import_no_framework(args):
    assert _modules_after(args) == "LOADED []"


def _fake(write_scenario, tmp_path, action="ok", runs=1, **extra):
    return write_scenario({
        "name": f"cli-{action}", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 60, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": list(range(1, runs + 1))},
        "options": {"fake": {"action": action, **extra}},
    }, name=f"{action}.yaml")


def test_exit_0_when_all_ok_and_1_when_a_run_failed(tmp_path, fake_backend, write_scenario, harness_cli):
    code, out, err = harness_cli("run", _fake(write_scenario, tmp_path), "--store", "a.db")
    assert code == 0, err
    assert "ok" in out and "fake" in out  # the summary table
    code, out, err = harness_cli("run", _fake(write_scenario, tmp_path, "raise"), "--store", "a.db")
    assert code == 1
    assert "planted failure" in out and "1 of 1 run(s) did not succeed" in err


def test_unsupported_is_an_answer_not_a_failure_but_a_session_that_measured_nothing_exits_3(
        tmp_path, fake_backend, write_scenario, harness_cli):
    mixed = write_scenario({
        "name": "mixed", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 60, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"fake.action": ["ok", "unsupported"]},
    }, name="mixed.yaml")
    code, out, err = harness_cli("run", mixed, "--store", "u.db", "--wide")
    assert code == 0, err  # an unsupported combination beside an ok run is an answer
    assert "unsupported" in out and "planted: no such technique here" in out
    code, out, err = harness_cli("run", _fake(write_scenario, tmp_path, "unsupported"), "--store", "u.db")
    assert code == 3, err  # nothing was measured: a CI job must not pass
    assert "unsupported" in out and "planted: no such technique here" in out
    assert "no run was ok" in err and "nothing was measured" in err
    code, out, err = harness_cli("run", _fake(write_scenario, tmp_path, "raise"), "--store", "u.db")
    assert code == 1  # a failure is a failure, measured or not


def test_a_device_that_is_not_there_exits_3(tmp_path, write_scenario, harness_cli):
    from harness.machine import nvml

    pytest.importorskip("torch")
    if nvml.gpus():
        pytest.skip("this machine has a GPU")
    path = write_scenario({"name": "nogpu", "workload": "gemm", "params": {"size": 32},
                           "measure": {"warmup": 0, "steps": 1, "repeats": 2, **ONE_PROCESS}, "backends": ["torch"]})
    started = time.monotonic()
    code, out, err = harness_cli("run", path, "--device", "cuda:0", "--store", "g.db")
    assert code == 3, err
    assert "unsupported" in out and "nothing was measured" in err
    # refused before any worker started, with the reason `harness env` shows
    assert "no GPU a worker could use" in err and "harness env" in err
    assert time.monotonic() - started < 30
    with open_store(tmp_path / "g.db") as store:
        assert all(r["duration_s"] == 0.0 for r in store.records())


def test_a_gpu_index_past_the_visible_ones_is_named_with_the_count(monkeypatch):
    from harness.machine import presence

    monkeypatch.setattr(presence, "visible_gpus", lambda: 2)
    assert presence.missing_device_reason("cuda:1") is None and presence.missing_device_reason("cpu") is None
    assert "2 visible GPU(s), cuda:0 to cuda:1" in presence.missing_device_reason("cuda:2")
    monkeypatch.setattr(presence, "visible_gpus", lambda: None)  # cannot be told: the worker decides
    assert presence.missing_device_reason("cuda:7") is None


def test_help_lists_every_exit_code():
    text = _invoke("--help").output
    for code in ("0 ", "1 ", "2 ", "3 ", "130", "143"):
        assert f"  {code}" in text or f" {code} " in text, code
    assert "unsupported" in text and "--resume" in text


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, fake_backend, write_scenario, harness_cli):
    code, out, err = harness_cli("run", _fake(write_scenario, tmp_path, runs=3), "--dry-run", "--store", "d.db")
    assert code == 0 and "plan: 3 run(s)" in out
    assert not (tmp_path / "d.db").exists()


def test_bad_input_exits_2_naming_file_and_field(tmp_path, write_scenario, harness_cli):
    path = write_scenario({"name": "x", "workload": "gemm", "params": {"size": "huge"}})
    code, out, err = harness_cli("validate", path)
    assert code == 2 and path in err and "`params.size`" in err and "Traceback" not in err
    code, out, err = harness_cli("run", path, "--backend", "mxnet")
    assert code == 2 and "Traceback" not in err
    code, out, err = harness_cli("run", "scenarios/none.yaml")
    assert code == 2 and "no such file" in err
    code, out, err = harness_cli("run", str(path), "--set", "precision")
    assert code == 2 and "KEY=VALUE" in err
    good = write_scenario({"name": "x", "workload": "gemm", "params": {"size": 8}}, name="good.yaml")
    code, out, err = harness_cli("run", good, "--device", "tpu")
    assert code == 2 and "cuda:N" in err


def test_results_exports_json_csv_and_table(tmp_path, fake_backend, write_scenario, harness_cli):
    code, _, err = harness_cli("run", _fake(write_scenario, tmp_path, runs=2), "--store", "r.db", "-q")
    assert code == 0, err
    code, out, _ = harness_cli("results", "--store", "r.db", "--format", "json")
    records = json.loads(out)
    assert isinstance(records, list) and len(records) == 2
    for name in ("run_id", "session_id", "scenario", "workload", "backend", "framework_version", "device",
                 "device_name", "params", "api", "status", "error", "metric", "unit", "median", "iqr", "ci_low",
                 "ci_high", "cv", "samples", "step_time_s", "first_step_s", "peak_allocated_bytes",
                 "device_used_bytes", "host_peak_rss_bytes", "tflops", "pct_of_peak", "energy_j", "avg_power_w",
                 "checks", "env", "started_at", "duration_s", "schema_version"):
        assert name in records[0], name
    assert records[0]["pct_of_peak"] is None and records[0]["energy_j"] is None  # not measured: null
    code, out, _ = harness_cli("results", "--store", "r.db", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 2 and json.loads(rows[0]["params"])["size"] == 32
    code, out, _ = harness_cli("results", "--store", "r.db")
    assert code == 0 and "median [95% CI]" in out
    code, out, err = harness_cli("results", "--store", "r.db", "--format", "parquet", "-o", "r.parquet")
    assert code == 0, err
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "r.parquet")) == 2


def test_load_results_returns_one_row_per_record(tmp_path, fake_backend, write_scenario, harness_cli):
    import harness

    code, _, err = harness_cli("run", _fake(write_scenario, tmp_path, runs=3), "--store", "l.db", "-q")
    assert code == 0, err
    frame = harness.load_results(tmp_path / "l.db")
    assert len(frame) == 3 and list(frame.columns[:3]) == ["schema_version", "run_id", "session_id"]
    assert set(frame["status"]) == {"ok"} and sorted(frame["params"].map(lambda p: p["batch"])) == [1, 2, 3]


def test_the_store_environment_variable_is_honoured(tmp_path, fake_backend, write_scenario, harness_cli):
    code, _, err = harness_cli("run", _fake(write_scenario, tmp_path), "-q", env={"HARNESS_STORE": str(tmp_path / "env.db")})
    assert code == 0, err
    with open_store(tmp_path / "env.db") as store:
        assert len(store.records()) == 1


def test_list_shows_scenarios_workloads_and_backends(harness_cli):
    code, out, err = harness_cli("list")
    assert code == 0, err
    assert "quickstart" in out and "resnet50_train" in out
    assert "torch" in out and "tensorflow" in out


def test_backend_tf_runs_only_tensorflow_and_both_backends_multiply_the_same_numbers(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    path = write_scenario({"name": "same", "workload": "gemm", "params": {"size": 64, "precision": "fp32"},
                           "measure": {"warmup": 0, "steps": 1, "repeats": 2, **ONE_PROCESS}, "devices": ["cpu"]})
    code, out, err = harness_cli("run", path, "--backend", "tf", "--store", "b.db")
    assert code == 0, err
    with open_store(tmp_path / "b.db") as store:
        tf_only = store.records()
    assert [r["backend"] for r in tf_only] == ["tensorflow"]
    code, out, err = harness_cli("run", path, "--backend", "pytorch", "--store", "b.db")
    assert code == 0, err
    with open_store(tmp_path / "b.db") as store:
        records = {r["backend"]: r for r in store.records()}
    assert set(records) == {"torch", "tensorflow"}
    assert records["torch"]["checks"]["correct"] and records["tensorflow"]["checks"]["correct"]
    assert records["torch"]["checks"]["inputs_fingerprint"] == records["tensorflow"]["checks"]["inputs_fingerprint"]
    other_seed = write_scenario({"name": "same", "workload": "gemm", "params": {"size": 64}, "seed": 1,
                                 "measure": {"warmup": 0, "steps": 1, "repeats": 2, **ONE_PROCESS}, "devices": ["cpu"]}, name="seed1.yaml")
    code, out, err = harness_cli("run", other_seed, "--backend", "torch", "--store", "c.db")
    with open_store(tmp_path / "c.db") as store:
        (reseeded,) = store.records()
    assert reseeded["checks"]["inputs_fingerprint"] != records["torch"]["checks"]["inputs_fingerprint"]


def test_resnet50_on_both_backends_is_the_same_model_on_the_same_images(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    path = write_scenario({"name": "same-model", "workload": "resnet50_train",
                           "params": {"batch_size": 2, "image_size": 32, "memory_format": "channels_last"},
                           "measure": {"warmup": 0, "steps": 1, "repeats": 1, **ONE_PROCESS}, "devices": ["cpu"]})
    code, out, err = harness_cli("run", path, "--backend", "all", "--store", "m.db")
    assert code == 0, err
    with open_store(tmp_path / "m.db") as store:
        records = {r["backend"]: r for r in store.records()}
    torch_checks, tf_checks = records["torch"]["checks"], records["tensorflow"]["checks"]
    assert torch_checks["model_parameters"] == tf_checks["model_parameters"] == 25_557_032
    assert torch_checks["inputs_fingerprint"] == tf_checks["inputs_fingerprint"]
    assert records["torch"]["metric"] == records["tensorflow"]["metric"] == "throughput"


def test_a_broken_plugin_is_listed_with_its_error_and_the_others_still_work(harness_cli):
    code, out, err = harness_cli("list", env={"HARNESS_BACKENDS": "bad=nowhere.module:Nope"})
    assert code == 0, err
    assert "bad" in out and "failed to load: ModuleNotFoundError" in out
    assert "torch" in out and "tensorflow" in out


def test_reading_results_never_writes_the_store(tmp_path, fake_backend, write_scenario, harness_cli):
    import hashlib

    code, _, err = harness_cli("run", _fake(write_scenario, tmp_path, runs=2), "--store", "ro.db", "-q")
    assert code == 0, err
    db = tmp_path / "ro.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    db.chmod(0o444)
    code, out, err = harness_cli("results", "--store", "ro.db", "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)) == 2
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    (tmp_path / "junk.db").write_bytes(b"not sqlite" * 50)
    code, out, err = harness_cli("results", "--store", "junk.db")
    assert code == 2 and "cannot be read" in err and "Traceback" not in err


# --------------------------------------------------------------------------- flags, resume ids, output
def _invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "604801", "1e400", "1e-320", "0.001", "0.999"])
def test_timeout_must_be_finite_and_positive(tmp_path, fake_backend, write_scenario, value):
    db = tmp_path / "t.db"
    result = _invoke("run", _fake(write_scenario, tmp_path), "--store", str(db), f"--timeout={value}")
    assert result.exit_code == 2 and "--timeout" in result.output and "finite" in result.output
    assert not db.exists()


@pytest.mark.parametrize("value", ["banana", "0.1", "0.4b", "1b", "100k", "512MiB", "1023MiB", "99999999TiB",
                                   "1e9", "", "-4GiB", "4 GiB GiB", "9" * 100])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_bad_memory_limit_is_refused_before_anything_is_written(tmp_path, fake_backend, write_scenario, value, dry_run):
    db = tmp_path / "m.db"
    marker = tmp_path / "m.marker"
    path = _fake(write_scenario, tmp_path, marker=str(marker))
    result = _invoke("run", path, "--store", str(db), "--memory-limit", value, *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 2, result.output
    assert "--memory-limit" in result.output and "1GiB" in result.output  # names the smallest limit that works
    assert not db.exists() and not marker.exists()


def test_memory_limits_from_the_floor_up_are_read_exactly():
    assert parse_size("1GiB") == MIN_MEMORY_LIMIT == 1024**3
    assert parse_size("1.5GiB") == 1610612736 and parse_size("4G") == 4 * 10**9 and parse_size(" 2000 MB ") == 2 * 10**9
    assert parse_size("8589934592") == 8 * 1024**3
    assert parse_size("8388607TiB") == 8388607 * 1024**4  # just under the OS's largest


def test_resume_of_an_unknown_session_creates_no_store_and_ids_are_literal(tmp_path, fake_backend, write_scenario):
    result = _invoke("run", "--resume", "deadbeef", "--store", str(tmp_path / "new.db"))
    assert result.exit_code == 2 and "no such file" in result.output
    assert not list(tmp_path.glob("new.db*"))  # nothing created
    db = tmp_path / "s.db"
    assert _invoke("run", _fake(write_scenario, tmp_path), "--store", str(db), "-q").exit_code == 0
    with open_store(db) as store:
        (session,) = store.sessions()
    sid = session.session_id
    before = db.read_bytes()
    for pattern in ("%", "_" * len(sid), "_%", sid[:3] + "%", ""):  # LIKE wildcards match nothing here
        result = _invoke("run", "--resume", pattern, "--store", str(db))
        assert result.exit_code == 2 and "--resume" in result.output, (pattern, result.output)
    assert db.read_bytes() == before
    result = _invoke("run", "--resume", sid[:6], "--store", str(db), "--dry-run")  # a unique prefix is enough
    assert result.exit_code == 0 and f"resuming session {sid}: 0 of 1 run(s)" in result.output
    result = _invoke("run", "--resume", sid, "--store", str(db), "--set", "size=8")
    assert result.exit_code == 2 and "--set" in result.output


def test_an_ambiguous_resume_prefix_names_the_sessions(tmp_path):
    db = tmp_path / "a.db"
    with open_store(db) as store:
        for sid in ("abc1", "abc2"):
            store.begin_session(sid, [], scenario_path=None, command="x")
    result = _invoke("run", "--resume", "abc", "--store", str(db))
    assert result.exit_code == 2 and "2 sessions match" in result.output and "abc1" in result.output


def _record(**fields):
    base = {"schema_version": 1, "session_id": "s", "run_key": "k", "backend": "torch", "device": "cpu",
            "params": {"size": 64}, "metric": "tflops", "unit": "TFLOP/s", "warnings": [], "env": {}}
    return {**base, **fields}


def test_results_keep_integers_integers_and_show_an_unmeasured_run_as_a_dash(tmp_path):
    db = tmp_path / "o.db"
    with open_store(db) as store:
        store.add(Result.from_dict(_record(run_id="a", status="ok", median=0.5, ci_low=0.4, ci_high=0.6, cv=0.01,
                          host_peak_rss_bytes=608702464, peak_allocated_bytes=1024, started_at="2026-11-30T00:00:01")))
        store.add(Result.from_dict(_record(run_id="b", status="timeout", median=None, cv=None, host_peak_rss_bytes=None,
                          error="no result within 3 s", started_at="2026-11-30T00:00:02")))
    result = _invoke("results", "--store", str(db), "--format", "json")
    records = {r["run_id"]: r for r in json.loads(result.output)}
    assert records["a"]["host_peak_rss_bytes"] == 608702464 and type(records["a"]["host_peak_rss_bytes"]) is int
    assert records["b"]["host_peak_rss_bytes"] is None and records["b"]["median"] is None
    result = _invoke("results", "--store", str(db), "--format", "csv")
    rows = {r["run_id"]: r for r in csv.DictReader(io.StringIO(result.output))}
    assert rows["a"]["host_peak_rss_bytes"] == "608702464" and rows["a"]["peak_allocated_bytes"] == "1024"
    assert rows["b"]["host_peak_rss_bytes"] == ""
    table = _invoke("results", "--store", str(db)).output
    timeout_line = next(line for line in table.splitlines() if "timeout" in line)
    assert "nan" not in table and "[-, -]" not in table and "TFLOP/s" not in timeout_line
    assert "0.5 [0.4, 0.6]" in table and timeout_line.startswith("torch [1]")
    assert "\n[1] no result within 3 s" in table  # the error, a footnote of its row


@pytest.mark.parametrize("content, field", [
    ("{not json", "not JSON"),
    ('{"records": 3}', "records"),
    ('[{"run_id": "x", "session_id": "s", "schema_version": "1"}]', "records[0].schema_version"),
    ('[{"run_id": "", "session_id": "s", "schema_version": 1}]', "records[0].run_id"),
    ('{"records": [], "sessions": [{"plan": []}]}', "sessions[0].session_id"),
])
def test_a_bad_file_to_import_is_refused_naming_the_field_and_nothing_is_written(tmp_path, content, field):
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    result = _invoke("results", "--import", str(bad), "--store", str(tmp_path / "i.db"))
    assert result.exit_code == 2 and str(bad) in result.output and field in result.output, result.output
    assert not (tmp_path / "i.db").exists()


def test_results_json_can_be_imported_into_another_store(tmp_path, fake_backend, write_scenario):
    assert _invoke("run", _fake(write_scenario, tmp_path, runs=2), "--store", str(tmp_path / "a.db"), "-q").exit_code == 0
    exported = tmp_path / "a.json"
    assert _invoke("results", "--store", str(tmp_path / "a.db"), "--format", "json", "-o", str(exported)).exit_code == 0
    for expected in ("took 2 new result(s) of 2", "took 0 new result(s) of 2"):  # a second import adds nothing
        result = _invoke("results", "--import", str(exported), "--store", str(tmp_path / "b.db"))
        assert result.exit_code == 0 and expected in result.output, result.output
    with open_store(tmp_path / "a.db") as a, open_store(tmp_path / "b.db") as b:
        assert a.records() == b.records()


# --------------------------------------------------------------------------- CLI edges
def test_max_runs_counts_the_runs_backend_and_device_leave(tmp_path):
    # graph_capture: 12 configurations x 2 backends x 4 processes (the least of `auto`) = 96 runs; torch's: 48
    result = _invoke("run", "graph_capture", "--dry-run", "--max-runs", "9", "--backend", "torch",
                     "--store", str(tmp_path / "g.db"))
    assert result.exit_code == 2
    assert "the plan has 48 runs" in result.output and "96" not in result.output
    assert "12 configuration(s)" in result.output and "measure.processes" in result.output
    assert "--max-runs 48" in result.output
    allowed = _invoke("run", "graph_capture", "--dry-run", "--max-runs", "48", "--backend", "torch")
    assert allowed.exit_code == 0 and "plan: 48 run(s)" in allowed.output
    assert "at most 48 in all" in allowed.output  # --max-runs also bounds the rounds `auto` adds
    both = _invoke("run", "graph_capture", "--dry-run", "--max-runs", "48")
    assert both.exit_code == 2 and "96 runs" in both.output
    one_device = _invoke("run", "graph_capture", "--dry-run", "--max-runs", "48", "--backend", "torch",
                         "--device", "cpu", "--set", "measure.processes=1")
    assert one_device.exit_code == 0 and "plan: 12 run(s)" in one_device.output
    assert not (tmp_path / "g.db").exists()


def _capacity(write_scenario, name="cap.yaml", **extra):
    return write_scenario({
        "name": "cap", "workload": "resnet50_train", "params": {"batch_size": 2, "image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"], "options": {"fake": {"action": "oom_above", "limit": 37}}, **extra,
    }, name=name)


def test_capacity_flags_override_the_file_and_a_resume_keeps_them(tmp_path, fake_backend, write_scenario):
    db = tmp_path / "cap.db"
    path = _capacity(write_scenario, capacity={"start": 1, "limit": 1024, "resolution": 1})
    result = _invoke("run", path, "--find-max-batch", "--capacity-start", "4", "--capacity-limit", "64",
                     "--capacity-resolution", "4", "--store", str(db), "-q")
    assert result.exit_code == 0, result.output
    with open_store(db) as store:
        rows = store.records()
        (session,) = store.sessions()
        stored = store.session(session.session_id)
    (record,) = [r for r in rows if r["metric"] == "max_batch_size"]
    probes = [p["params"]["batch_size"] for p in rows if p.get("probe_of")]
    assert probes[0] == 4 and max(probes) == 64  # started at 4, never beyond the limit
    assert record["checks"]["search"].startswith("doubling from 4") and "within 4; limit 64" in record["checks"]["search"]
    assert 33 <= record["median"] <= 37  # within the resolution of the true limit, 37
    assert all(entry["capacity"] == {"start": 4, "limit": 64, "resolution": 4, "steps": 10} for entry in stored.plan)
    assert stored.settings.capacity_start == 4 and stored.settings.capacity_resolution == 4
    sid = session.session_id
    refused = _invoke("run", "--resume", sid, "--capacity-start", "8", "--store", str(db), "--dry-run")
    assert refused.exit_code == 2 and "--capacity-start 8" in refused.output and "start 4" in refused.output
    same = _invoke("run", "--resume", sid, "--capacity-start", "4", "--store", str(db), "--dry-run")
    assert same.exit_code == 0, same.output


def test_each_probe_says_on_screen_whether_it_fit_and_where_its_time_went(tmp_path, fake_backend, write_scenario):
    path = _capacity(write_scenario, capacity={"start": 16, "limit": 64, "resolution": 8})
    result = _invoke("run", path, "--find-max-batch", "--store", str(tmp_path / "p.db"))
    assert result.exit_code == 0, result.output
    assert "probe at batch_size=32: fits in " in result.output
    assert "probe at batch_size=64: does not fit in " in result.output  # the fake's limit is 37
    lines = result.output.replace("\n  ", " ").splitlines()  # a progress line wraps at the width
    line = next(x for x in lines if "probe at batch_size=16: fits" in x)
    assert "process start/exit " in line and "model and inputs " in line and "steps " in line


def test_a_capacity_resolution_can_be_a_share_of_the_answer(tmp_path, fake_backend, write_scenario):
    db = tmp_path / "share.db"
    path = _capacity(write_scenario, capacity={"start": 4, "limit": 1024, "resolution": "10%"})
    result = _invoke("run", path, "--find-max-batch", "--store", str(db), "-q")
    assert result.exit_code == 0, result.output
    with open_store(db) as store:
        (record,) = [r for r in store.records() if r["metric"] == "max_batch_size"]
    assert 34 <= record["median"] <= 37 and record["checks"]["within_pct"] <= 10  # true limit 37, 10% of 34 is 3
    assert "within 10%" in record["checks"]["search"]


@pytest.mark.parametrize("args, message", [
    (["--capacity-start", "4"], "--capacity-start: only with --find-max-batch"),
    (["--find-max-batch", "--capacity-start", "64", "--capacity-limit", "32"], "--capacity-limit 32 is below the start"),
    (["--find-max-batch", "--capacity-start", "0"], "--capacity-start"),
    (["--find-max-batch", "--capacity-limit", "99999999"], "--capacity-limit 99999999"),
    (["--find-max-batch", "--capacity-resolution", "0%"], "--capacity-resolution"),
    (["--find-max-batch", "--capacity-resolution", "two"], "--capacity-resolution"),
])
def test_bad_capacity_flags_exit_2_before_anything_is_written(tmp_path, fake_backend, write_scenario, args, message):
    db = tmp_path / "c.db"
    result = _invoke("run", _capacity(write_scenario), *args, "--store", str(db))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not db.exists()


def test_a_capacity_start_that_cannot_train_is_refused_naming_it(tmp_path, write_scenario):
    from harness.seam.backend import available_backends

    if not available_backends()["torch"].installed():
        pytest.skip("torch is not installed")
    db = tmp_path / "t.db"
    base = {"name": "cap1", "workload": "resnet50_train", "params": {"batch_size": 8, "image_size": 32},
            "measure": {"warmup": 0, "steps": 1, "repeats": 1, **ONE_PROCESS}, "backends": ["torch"], "devices": ["cpu"]}
    flag = _invoke("run", write_scenario(base), "--find-max-batch", "--capacity-start", "1", "--store", str(db))
    assert flag.exit_code == 2 and "--capacity-start 1" in flag.output
    assert "torch on cpu cannot train" in flag.output and "per channel" in flag.output
    in_file = write_scenario({**base, "capacity": {"start": 1}}, name="file.yaml")
    from_file = _invoke("run", in_file, "--store", str(db))
    assert from_file.exit_code == 2 and "cap1: capacity.start 1" in from_file.output and "per channel" in from_file.output
    assert not db.exists()  # refused before anything ran or was written
    # the default start moves to the first batch every configuration can train at, and says so
    default = _invoke("run", write_scenario(base, name="d.yaml"), "--find-max-batch", "--dry-run")
    assert default.exit_code == 0, default.output
    assert "the capacity search starts at batch_size=2, not 1" in default.output


def test_backend_runs_the_documents_written_for_it_and_replaces_only_where_none_is():
    # on the H200 (2026-11-30) `harness run scenarios/gpu_comparison.yaml --backend tf` trained TensorFlow eagerly:
    # the torch document's backends were replaced, though the file has a TensorFlow document for that training
    tf = _invoke("run", "gpu_comparison", "--dry-run", "--wide", "--backend", "tf")  # --wide: every setting a line
    assert tf.exit_code == 0, tf.output
    plan = [line for line in tf.output.splitlines() if line.strip()[:1].isdigit()]
    assert plan and all(" tensorflow on " in line for line in plan)
    assert not any("execution=eager" in line and "resnet50_train" in line for line in plan)
    assert "plan: 16 run(s)" in tf.output  # gemm 8, model.fit ResNet 8
    assert "skipped gpu-comparison-resnet50-torch (written for torch)" in tf.output
    torch = _invoke("run", "gpu_comparison", "--dry-run", "--wide", "--backend", "torch")
    assert "plan: 16 run(s)" in torch.output and "execution=default" not in torch.output
    # a file written for one framework runs whole on another (the capacity file lists torch alone)
    single = _invoke("run", "benchmarks/h200/capacity.yaml", "--dry-run", "--wide", "--backend", "tf")
    assert single.exit_code == 0 and " tensorflow on cuda:0" in single.output and "skipped" not in single.output


def test_the_command_list_shows_each_command_s_own_help_and_imports_no_command():
    import importlib
    import inspect

    from harness.cli import COMMANDS

    for name, line in COMMANDS.items():
        own = inspect.cleandoc(importlib.import_module(f"harness.commands.{name.replace('-', '_')}").command.help)
        assert line == own.split("\n\n")[0].replace("\n", " "), name
    code = ("import sys; from harness.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('harness.commands.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert all(name in out for name in COMMANDS)


def test_a_mistyped_scenario_name_is_answered_with_the_closest_bundled_one():
    for command in ("run", "validate"):
        result = _invoke(command, "quickstrat")
        assert result.exit_code == 2
        assert "did you mean `quickstart`?" in result.output, result.output
    far = _invoke("validate", "nothing_like_any_scenario")
    assert far.exit_code == 2 and "did you mean" not in far.output and "no such file" in far.output


def test_a_mistyped_set_key_is_answered_with_the_closest_field():
    measure = _invoke("run", "quickstart", "--dry-run", "--set", "measure.repeat=2")
    assert measure.exit_code == 2 and "field `measure.repeat`: unknown field; did you mean `repeats`?" in measure.output
    param = _invoke("run", "quickstart", "--dry-run", "--set", "precison=fp16")
    assert param.exit_code == 2 and "did you mean `precision`?" in param.output
    threads = _invoke("validate", "quickstart", "--set", "cpu_threads.intra=2")
    assert threads.exit_code == 2 and "did you mean `intra_op`?" in threads.output
