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

from harness.backend import Backend
from harness.errors import Unsupported
from harness.measure import WallClock, run_timed


class FakeBackend(Backend):
    name = "fake"
    aliases = ("fk",)
    distributions = ("numpy",)
    workloads = {"gemm": {"precision": ("fp32", "tf32", "fp16", "bf16")}, "resnet50_train": {}}

    def execute(self, spec: dict, ctx) -> dict:
        action = spec["options"].get("action", "ok")
        marker = spec["options"].get("marker")
        if marker:  # lets a test see that this run started
            with open(marker, "a", encoding="utf-8") as fh:
                fh.write(f"{spec['run_id']}\n")
        if action == "raise":
            raise RuntimeError("planted failure")
        if action == "exit":
            os._exit(3)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "hang":
            time.sleep(3600)
        if action == "hang_at_exit":  # a thread that would keep an orderly interpreter exit waiting forever
            threading.Thread(target=time.sleep, args=(3600,), name="never-ends", daemon=False).start()
        if action == "write_then_hang":  # the result reaches disk, then the process never leaves
            from harness.worker import write_json_atomic

            write_json_atomic(sys.argv[2], {"status": "ok", "device": "cpu", "samples": [1.0, 1.0, 1.0]})
            time.sleep(3600)
        if action == "unsupported":
            raise Unsupported("planted: no such technique here")
        if action == "oom":
            raise MemoryError("planted: cannot allocate")
        if action == "sleep":
            time.sleep(float(spec["options"].get("seconds", 1)))
        if action == "oom_above":  # a device with a memory limit: batches above `limit` do not fit
            if spec["params"].get("batch_size", 0) > int(spec["options"]["limit"]):
                raise MemoryError(f"batch {spec['params']['batch_size']} does not fit")
        size = 64
        a = np.ones((size, size), dtype=np.float32)
        timing = run_timed(lambda: a @ a, WallClock(), spec["measure"], work_per_step=2 * size**3)
        return {
            "device": "cpu" if spec["device"] == "auto" else spec["device"],
            "device_name": "fake cpu",
            "framework_version": np.__version__,
            "api": {"precision": "numpy.matmul"},
            "samples": [r / 1e12 for r in timing.rates(2 * size**3)],
            "step_time_s": timing.step_time_s(),
            "first_step_s": timing.first_step_s,
            "checks": {"correct": True},
            "timing": {"stop_reason": timing.stop_reason, "steps_per_block": timing.steps_per_block},
        }
