"""`harness run` as a user runs it, in a subprocess: the plugin beside the bundled backends, each run its own worker."""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import yaml

pytest.importorskip("jax")

from conftest import PLUGIN, ROOT  # noqa: E402

from harness.results.store import open_store  # noqa: E402
from harness.timing.settings import Measure  # noqa: E402

#: one worker per configuration, where this harness runs several (measure.processes)
ONE_PROCESS = {"processes": 1} if "processes" in Measure.model_fields else {}
#: the GPU image's route: the plugin on PYTHONPATH and named in HARNESS_BACKENDS, not pip-installed
DEVELOPMENT_ROUTE = {"HARNESS_BACKENDS": "jax=harness_jax:JaxBackend"}


def harness(tmp_path, *args, env: dict | None = None, timeout: int = 900):
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN)]), **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=environment)
    return proc.returncode, proc.stdout, proc.stderr


def plugin_env() -> dict:
    """Nothing when the plugin is pip-installed (its entry point is found); else HARNESS_BACKENDS."""
    installed = any(ep.name == "jax" for ep in entry_points(group="harness.backends"))
    return {} if installed else DEVELOPMENT_ROUTE


@pytest.mark.parametrize("route", ["installed or not", "HARNESS_BACKENDS"])
def test_harness_list_names_the_jax_backend(tmp_path, route):
    env = plugin_env() if route == "installed or not" else DEVELOPMENT_ROUTE
    code, out, err = harness(tmp_path, "list", env=env)
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("jax "))
    # `harness list` wraps an entry to the terminal's width: its continuation lines are indented past the name
    entry = [lines[start]] + [line for line in itertools.takewhile(
        lambda line: line.startswith(" " * 23), lines[start + 1:])]
    line = " ".join(part.strip() for part in entry)
    # and every training workload registered with a Flax part (mlp_train where its plugin is found)
    workloads = set(line.split("workloads:")[1].replace(",", " ").split())
    assert "installed" in line and {"gemm", "resnet50_train"} <= workloads


def test_gemm_through_torch_tensorflow_and_jax_multiplies_the_same_numbers(tmp_path):
    for framework in ("torch", "tensorflow"):
        if importlib.util.find_spec(framework) is None:
            pytest.skip(f"{framework} is not installed")
    scenario = {
        "name": "three-frameworks",
        "workload": "gemm",
        "params": {"size": 64, "precision": "fp32"},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, **ONE_PROCESS},
        "backends": ["torch", "tensorflow", "jax"],
        "devices": ["cpu"],
    }
    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    code, out, err = harness(tmp_path, "run", str(path), "--store", "s.db", env=plugin_env())
    assert code == 0, (out[-3000:], err[-3000:])
    with open_store(tmp_path / "s.db") as store:
        records = {r["backend"]: r for r in store.records()}
    assert set(records) == {"torch", "tensorflow", "jax"}
    for name, record in records.items():
        assert record["status"] == "ok", (name, record.get("error"))
        assert record["checks"]["correct"] is True
    assert len({r["checks"]["inputs_fingerprint"] for r in records.values()}) == 1
    jax_record = records["jax"]
    assert jax_record["framework_version"] and jax_record["env"]["framework"]["jax"] == jax_record["framework_version"]
    assert jax_record["api"]["execution"].startswith("eager: jnp.matmul")
    assert jax_record["env"]["framework"]["variables"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_a_mode_jax_cannot_run_is_unsupported_with_its_reason(tmp_path):
    scenario = {"name": "no-graph", "workload": "gemm", "params": {"size": 32},
                "measure": {"warmup": 0, "steps": 1, "repeats": 1, **ONE_PROCESS},
                "backends": ["jax"], "devices": ["cpu"], "sweep": {"execution": ["eager", "graph", "cuda_graph"]}}
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    code, out, err = harness(tmp_path, "run", str(path), "--store", "g.db", env=plugin_env())
    assert code == 0, err  # unsupported is an answer, not a failure (one run measured: exit 0)
    with open_store(tmp_path / "g.db") as store:
        records = {r["params"]["execution"]: r for r in store.records()}
    assert records["eager"]["status"] == "ok", records["eager"]["error"]
    assert records["graph"]["status"] == "unsupported" and "JAX has no `graph` mode" in records["graph"]["error"]
    assert records["cuda_graph"]["status"] == "unsupported" and "command buffers" in records["cuda_graph"]["error"]


def test_cpu_threads_intra_op_narrows_the_worker_to_that_many_cores(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two usable cores")
    scenario = {"name": "threads", "workload": "gemm", "params": {"size": 64},
                "measure": {"warmup": 0, "steps": 1, "repeats": 2, **ONE_PROCESS},
                "backends": ["jax"], "devices": ["cpu"], "cpu_threads": {"intra_op": 1, "inter_op": 2}}
    path = tmp_path / "threads.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    code, out, err = harness(tmp_path, "run", str(path), "--store", "t.db", env=plugin_env())
    assert code == 0, err
    with open_store(tmp_path / "t.db") as store:
        (record,) = store.records()
    threads = record["env"]["framework"]["threads"]
    assert threads["intra_op"] == 1 and threads["api"].startswith("os.sched_setaffinity(0, 1 cores)")
    assert threads["inter_op_not_applied"] == 2
    assert any("inter_op was not applied" in w for w in record["warnings"])
