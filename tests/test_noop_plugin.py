"""The framework-free workload plugin (tests/noop_plugin.py) the cluster scale figures are measured with: a
run of it imports no framework and ends `ok`, through `harness run` on this machine and, where the services
run (scripts/services.sh), as Slurm jobs into PostgreSQL."""

import os
import subprocess
import sys
import time

import pytest
import yaml

from harness.results.store import open_store
from tests import services
from tests.noop_plugin import FRAMEWORKS, REGISTER

pg_url = services.pg_url  # the fixtures: a fresh database on the test server, a Slurm to submit to
slurm = services.slurm


def _scenario(tmp_path, counts):
    path = tmp_path / "noop.yaml"
    path.write_text(yaml.safe_dump({
        "name": "noop", "workload": "noop", "params": {"count": 10},
        "measure": {"warmup": 0, "steps": 1, "repeats": 3, "timeout_s": 60, "processes": 1},
        "backends": ["python"], "devices": ["cpu"], "sweep": {"count": list(counts)},
    }), encoding="utf-8")
    return str(path)


def _run(tmp_path, *args, env=None):
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "run", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **REGISTER, **(env or {})})
    return done, time.monotonic() - start


def _assert_framework_free(records, counts):
    assert sorted(r["params"]["count"] for r in records) == sorted(counts)
    for record in records:
        assert record["status"] == "ok", record.get("error")
        assert record["backend"] == "python" and record["workload"] == "noop"
        # the step's sum was right, and the worker held no framework module
        assert record["checks"] == {"correct": True, "frameworks_imported": []}
        assert record["duration_s"] < 5


def test_the_plugin_imports_no_framework_where_it_is_registered():
    code = ("import sys; from harness.workloads import WORKLOADS; from harness.seam.backend import available_backends;"
            "b = available_backends()['python']; assert 'noop' in WORKLOADS and b.installed();"
            f"print(sorted({set(FRAMEWORKS)!r} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **REGISTER})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_runs_of_the_framework_free_workload_end_ok_on_this_machine(tmp_path):
    store = str(tmp_path / "r.db")
    done, _ = _run(tmp_path, _scenario(tmp_path, [5, 7]), "--store", store,
                   env={"HARNESS_HOST_LOCK": str(tmp_path / "lock")})
    assert done.returncode == 0, done.stderr
    with open_store(store, readonly=True) as opened:
        _assert_framework_free(opened.records(), [5, 7])


@pytest.mark.xdist_group("slurm")  # one node: the Slurm tests run in one worker, in turn
def test_runs_of_the_framework_free_workload_go_through_slurm_into_postgresql(tmp_path, slurm, pg_url):
    counts = [1, 2, 3, 4, 5]
    done, _ = _run(tmp_path, _scenario(tmp_path, counts), "--executor", "slurm", "--store", pg_url,
                   env={"HARNESS_HOST_LOCK": str(tmp_path / "lock")})
    assert done.returncode == 0, done.stderr
    assert "5 run(s) submitted as job array" in done.stderr
    with open_store(pg_url, readonly=True) as opened:
        records = opened.records()
    _assert_framework_free(records, counts)
    assert {r["slurm"]["state"] for r in records} == {"COMPLETED"}
    assert len({r["slurm"]["job_id"].split("_")[0] for r in records}) == 1  # one array
