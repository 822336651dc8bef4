"""A workload plugin that imports no framework, and the backend that runs it: a run costs harness's own
overhead (its worker's start, the executor, the store), not a framework's start-up. The cluster scale
figures (scripts/cluster_scale.py, docs/distributed.md "How far it goes") are measured with it.

Registered without installing, as a plugin under development is (docs/architecture.md, "Bring your own
model"):

    HARNESS_WORKLOADS=noop=tests.noop_plugin:NOOP HARNESS_BACKENDS=python=tests.noop_plugin:PythonBackend

`noop` is a workload no bundled backend has a part for, so it is implemented whole by the one backend that
names it in its `modules`: `python`, whose "framework" is the interpreter itself.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from pydantic import Field

from harness.seam.adapter import DeviceDefaults, Prepared
from harness.seam.backend import Backend
from harness.timing.loop import WallClock
from harness.workloads.base import Params, Workload

#: The modules whose import would make a run cost a framework's start-up.
FRAMEWORKS = frozenset({"torch", "tensorflow", "jax", "keras", "flax"})


class NoopParams(Params):
    """Parameters of noop: how many integers one step adds up (the step's only work), how many times."""

    count: int = Field(100, ge=1, le=10_000_000)
    times: int = Field(1, ge=1, le=10_000)


NOOP = Workload(
    name="noop",
    description="adds up `count` integers in pure Python; a run costs harness's overhead, not a framework's",
    params_model=NoopParams,
    metric="throughput",
    unit="steps/s",
    flops_per_step=lambda p: None,
    items_per_step=lambda p: 1.0,
    peak_precision=lambda p: "fp32",
    verdict=lambda checks, p: ("failed", "wrong sum") if checks.get("correct") is False else (None, None),
    x_param="count",
)


class PythonDevice(DeviceDefaults):
    """The CPU as the interpreter sees it: no allocator, no synchronization."""

    neutral = "cpu"

    def identity(self) -> dict:
        """The interpreter's identity fields."""
        return {"device": "cpu", "device_name": platform.processor() or platform.machine(),
                "framework_version": platform.python_version(), "env": {}}

    def clock(self):
        """The plain wall clock: the step runs on the calling thread."""
        return WallClock(), "time.perf_counter"


def prepare(params: NoopParams, device, run) -> Prepared:
    """The step: sum(range(count)), checked against its closed form after the timed region; the checks also name
    every framework the worker process holds (none, or the plugin is not what it says)."""
    count, times = params.count, params.times
    answers = []
    return Prepared(step=lambda: answers.extend(sum(range(count)) for _ in range(times)), api={"step": "builtins.sum"},
                    checks=lambda: {"correct": all(a == count * (count - 1) // 2 for a in answers),
                                    "frameworks_imported": sorted(FRAMEWORKS & set(sys.modules))})


class PythonBackend(Backend):
    """A backend whose framework is the Python interpreter: it runs `noop` only, on the CPU."""

    name = "python"
    workloads = {"noop": {}}
    modules = {"noop": "tests.noop_plugin"}

    def framework_version(self) -> str | None:
        """The interpreter's version: always installed."""
        return platform.python_version()

    def open_device(self, device: str, cpu_threads: dict):
        """The CPU, whatever was asked (the scenario says `cpu`)."""
        return PythonDevice()


#: The environment that registers the plugin (a test's, the scale script's, a job's: sbatch passes it on).
REGISTER = {"HARNESS_WORKLOADS": "noop=tests.noop_plugin:NOOP",
            "HARNESS_BACKENDS": "python=tests.noop_plugin:PythonBackend",
            # the checkout first on the path: `tests` is not an installed package, and Slurm's jobs import it too
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                        os.environ.get("PYTHONPATH")]))}
