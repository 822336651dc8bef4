"""The command line: exit codes, no framework imported where none is needed, exports."""

import csv
import io
import json
import subprocess
import sys

import pytest

from harness.store import Store

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
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 60},
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


def test_unsupported_is_an_answer_not_a_failure(tmp_path, fake_backend, write_scenario, harness_cli):
    code, out, err = harness_cli("run", _fake(write_scenario, tmp_path, "unsupported"), "--store", "u.db")
    assert code == 0, err
    assert "unsupported" in out and "planted: no such technique here" in out


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
    assert set(frame["status"]) == {"ok"} and frame["params"].map(lambda p: p["batch"]).tolist() == [1, 2, 3]


def test_the_store_environment_variable_is_honoured(tmp_path, fake_backend, write_scenario, harness_cli):
    code, _, err = harness_cli("run", _fake(write_scenario, tmp_path), "-q", env={"HARNESS_STORE": str(tmp_path / "env.db")})
    assert code == 0, err
    with Store(tmp_path / "env.db") as store:
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
                           "measure": {"warmup": 0, "steps": 1, "repeats": 2}, "devices": ["cpu"]})
    code, out, err = harness_cli("run", path, "--backend", "tf", "--store", "b.db")
    assert code == 0, err
    with Store(tmp_path / "b.db") as store:
        tf_only = store.records()
    assert [r["backend"] for r in tf_only] == ["tensorflow"]
    code, out, err = harness_cli("run", path, "--backend", "pytorch", "--store", "b.db")
    assert code == 0, err
    with Store(tmp_path / "b.db") as store:
        records = {r["backend"]: r for r in store.records()}
    assert set(records) == {"torch", "tensorflow"}
    assert records["torch"]["checks"]["correct"] and records["tensorflow"]["checks"]["correct"]
    assert records["torch"]["checks"]["inputs_fingerprint"] == records["tensorflow"]["checks"]["inputs_fingerprint"]
    other_seed = write_scenario({"name": "same", "workload": "gemm", "params": {"size": 64}, "seed": 1,
                                 "measure": {"warmup": 0, "steps": 1, "repeats": 2}, "devices": ["cpu"]}, name="seed1.yaml")
    code, out, err = harness_cli("run", other_seed, "--backend", "torch", "--store", "c.db")
    with Store(tmp_path / "c.db") as store:
        (reseeded,) = store.records()
    assert reseeded["checks"]["inputs_fingerprint"] != records["torch"]["checks"]["inputs_fingerprint"]


def test_resnet50_on_both_backends_is_the_same_model_on_the_same_images(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    path = write_scenario({"name": "same-model", "workload": "resnet50_train",
                           "params": {"batch_size": 2, "image_size": 32, "memory_format": "channels_last"},
                           "measure": {"warmup": 0, "steps": 1, "repeats": 1}, "devices": ["cpu"]})
    code, out, err = harness_cli("run", path, "--backend", "all", "--store", "m.db")
    assert code == 0, err
    with Store(tmp_path / "m.db") as store:
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
