"""A backend for tests: does what its `options.action` says, in a real worker process.

Registered through HARNESS_BACKENDS, the way a third-party plugin under development would be.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.errors import Unsupported
from harness.seam.adapter import DeviceDefaults, Prepared
from harness.seam.backend import Backend
from harness.timing.loop import WallClock


def _paused_states() -> list[str]:
    """The scheduler state (/proc/PID/stat: T is stopped) of each process this run was asked to pause, read
    while it is timed (checks run before the timed region's pause ends)."""
    states = []
    for pid in filter(None, os.environ.get("HARNESS_PAUSE_PIDS", "").split(",")):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                states.append(fh.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            states.append("gone")
    return states


class FakeOptions(BaseModel):
    """Whatever a test tells the fake to do."""

    model_config = ConfigDict(extra="forbid")

    action: str = "ok"
    marker: str | None = None
    seconds: float = 1.0
    limit: int | None = None


class FakeDevice(DeviceDefaults):
    """The CPU, as the fake sees it: no scope, no allocator peak, nothing measured after the timed region."""

    neutral = "cpu"

    def identity(self) -> dict:
        """The fake's identity fields."""
        return {"device": "cpu", "device_name": "fake cpu", "framework_version": np.__version__, "env": {"fake": True}}

    def clock(self):
        """The plain wall clock: numpy's products run on the calling thread."""
        return WallClock(), "time.perf_counter"


class FakeBackend(Backend):
    """A backend whose every run does what its `options.action` says (a failure, a hang, a product)."""

    name = "fake"
    aliases = ("fk",)
    distributions = ("numpy",)
    workloads = {"gemm": {"precision": ("fp32", "tf32", "fp16", "bf16")}, "resnet50_train": {}}
    options_model = FakeOptions

    def open_device(self, device: str, cpu_threads: dict):
        """The fake CPU, whatever was asked."""
        return FakeDevice()

    def out_of_memory(self, exc: BaseException):
        """The planted allocation failure counts as out of memory."""
        return "planted allocation failure" if "planted allocation failure" in str(exc) else None

    def compile_cache_env(self, directory: str) -> dict[str, str]:
        """A cache folder the fake "compiles" into: prepare notes whether it found an earlier process's entry."""
        return {"HARNESS_FAKE_CACHE": directory}

    def prepare(self, workload: str, params, device, run) -> Prepared:
        """Do what `options.action` says, then a step of one small numpy product."""
        options = run.options
        cache = os.environ.get("HARNESS_FAKE_CACHE")
        found = None
        if cache:  # what a compiler with a persistent cache does: look for an entry, write one
            entry = os.path.join(cache, "compiled")
            found = os.path.exists(entry)
            with open(entry, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")
        action = options["action"]
        if options["marker"]:  # lets a test see that this run started
            with open(options["marker"], "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")
        if action == "raise":
            raise RuntimeError("planted failure")
        if action == "raise_oom_message":
            raise RuntimeError("planted allocation failure in a library")
        if action == "exit":
            os._exit(3)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "hang":
            time.sleep(3600)
        if action == "hang_at_exit":  # a thread that would keep an orderly interpreter exit waiting forever
            threading.Thread(target=time.sleep, args=(3600,), name="never-ends", daemon=False).start()
        if action == "write_then_hang":  # the result reaches disk, then the process never leaves
            from harness.worker.main import write_json_atomic

            write_json_atomic(sys.argv[2], {"status": "ok", "device": "cpu", "samples": [1.0, 1.0, 1.0]})
            time.sleep(3600)
        if action == "unsupported":
            raise Unsupported("planted: no such technique here")
        if action == "oom":
            raise MemoryError("planted: cannot allocate")
        if action == "sleep":
            time.sleep(options["seconds"])
        batch = getattr(params, "batch_size", 0)
        if action == "oom_above" and batch > int(options["limit"]):  # a device with a memory limit
            raise MemoryError(f"batch {batch} does not fit")
        if action == "slow_steps":  # every step sleeps: the run holds the host's timing lock that long
            return Prepared(step=lambda: time.sleep(options["seconds"]), api={"precision": "sleep"},
                            checks=lambda: {"correct": True})
        size = 64
        a = np.ones((size, size), dtype=np.float32)
        api = {"precision": "numpy.matmul", **({"cache_entry_found": found, "cache": cache} if cache else {})}
        return Prepared(step=lambda: a @ a, api=api,
                        checks=lambda: {"correct": True, **({"paused_states": _paused_states()}
                                                            if os.environ.get("HARNESS_PAUSE_PIDS") else {})})
