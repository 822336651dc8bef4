"""Checks printed before a session: conditions that would skew the figures it is about to measure."""

from __future__ import annotations

import os
import sys

from harness.nvml import nvml


def _gpu_warnings() -> list[str]:
    lib = nvml()
    if lib is None:
        return []
    out = []
    try:
        count = lib.nvmlDeviceGetCount()
    except Exception:
        return []
    me = os.getpid()
    for i in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(i)
        except Exception:
            continue
        try:
            procs = [p for p in lib.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != me]
            if procs:
                out.append(f"GPU {i}: {len(procs)} other process(es) are running on it; figures will be shared with them")
        except Exception:
            pass
        try:
            reasons = lib.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            bad = {
                "HW slowdown": getattr(lib, "nvmlClocksThrottleReasonHwSlowdown", 0),
                "thermal slowdown": getattr(lib, "nvmlClocksThrottleReasonSwThermalSlowdown", 0),
                "power brake": getattr(lib, "nvmlClocksThrottleReasonHwPowerBrakeSlowdown", 0),
            }
            hits = [name for name, bit in bad.items() if bit and reasons & bit]
            if hits:
                out.append(f"GPU {i}: clocks are being throttled ({', '.join(hits)})")
        except Exception:
            pass
    return out


def environment_warnings(env: dict | None = None) -> list[str]:
    """Warnings about this machine's state: other GPU processes, throttling, debug settings, CPU governor."""
    from harness.env import capture

    env = env or capture()
    out = _gpu_warnings()
    if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1":
        out.append("CUDA_LAUNCH_BLOCKING=1 serializes every kernel launch: timings will not reflect normal use")
    if hasattr(sys, "gettotalrefcount"):
        out.append("this Python is a debug build: host-side overhead is inflated")
    governor = env.get("cpu_governor")
    if governor and governor != "performance":
        out.append(f"CPU frequency governor is {governor!r}, not 'performance': host-bound figures may vary")
    return out
