"""The hand-written JAX loop (benchmarks/jax_resnet50_handloop.py) runs tiny on the CPU, without harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("flax")

from conftest import PLUGIN  # noqa: E402

from harness.workloads.resnet50_train import parameter_count  # noqa: E402

SCRIPT = PLUGIN / "benchmarks" / "jax_resnet50_handloop.py"


def test_the_hand_loop_trains_torchvisions_resnet50_without_importing_harness(tmp_path):
    # run from an empty folder with only the site packages: harness cannot be imported by accident
    code = (
        "import runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__'); "
        "bad = [m for m in sys.modules if m == 'harness' or m.startswith(('harness.', 'harness_jax'))]; "
        "assert not bad, bad"
    )
    args = ["--device", "cpu", "--batch-size", "2", "--image-size", "32", "--num-classes", "10",
            "--steps", "1", "--warmup", "1", "--repeats", "2"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["trainable_parameters"] == parameter_count(10)
    assert len(report["samples"]) == 2 and report["images_per_s"] > 0 and report["first_step_s"] > 0
    assert report["settings"]["steps"] == 1 and report["jax"]
    assert report["device_name"] == "cpu" and report["peak_allocated_bytes"] is None
