"""Checks of the machine's state: conditions that skew the figures measured on it.

`environment_warnings()` is printed by `harness run` before a session starts and by `harness env`;
`busy_reasons(env, device)` reads the machine state a record's `env` captured (harness.machine.env
`machine_state`) and says whether that run shared its machine, for `harness compare` to mark.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from harness.machine.env import Environment, Isolation, capture
from harness.machine.frameworks import tensorflow_distributions
from harness.machine.nvml import nvml
from harness.machine.variables import variables


def _throttle_warnings() -> list[str]:
    lib = nvml()
    if lib is None:
        return []
    out = []
    try:
        count = lib.nvmlDeviceGetCount()
    except Exception:
        return []
    for i in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(i)
            reasons = lib.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        except Exception:
            continue
        bad = {
            "HW slowdown": getattr(lib, "nvmlClocksThrottleReasonHwSlowdown", 0),
            "thermal slowdown": getattr(lib, "nvmlClocksThrottleReasonSwThermalSlowdown", 0),
            "power brake": getattr(lib, "nvmlClocksThrottleReasonHwPowerBrakeSlowdown", 0),
        }
        hits = [name for name, bit in bad.items() if bit and reasons & bit]
        if hits:
            out.append(f"GPU {i}: clocks are being throttled ({', '.join(hits)})")
    return out


def _cores(env: Environment) -> int | None:
    # the load average counts the whole host's threads: compare it with the host's cores
    cores = env.cpu_count or env.cpu_usable
    return int(cores) if cores else None


def _gpu_indices(env: Environment, device: str | None) -> list[str] | None:
    """The NVML indices a run on `device` used (None: every GPU; []: none, a CPU run). With no device
    known (a session's start, `auto`), the GPUs CUDA_VISIBLE_DEVICES leaves visible: no run of this
    process can use the others (whose work busy_reasons still counts: it shares the host)."""
    visible = env.variable("CUDA_VISIBLE_DEVICES").strip()
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if device is None or device == "auto":
        return entries if entries and all(e.isdigit() for e in entries) else None
    if not str(device).startswith("cuda:"):
        return []
    try:
        index = int(str(device).split(":", 1)[1])
    except ValueError:
        return None
    if visible:
        if index < len(entries) and entries[index].isdigit():
            return [entries[index]]
        return None  # UUIDs or an odd mask: any GPU may be the one
    return [str(index)]


#: Utilisation (percent) above which another GPU of the host counts as busy where NVML lists no process on it
#: (a process of another container): it shares the host's power and cooling with the run.
BUSY_GPU_PCT = 10


def busy_reasons(env: Environment | Mapping | None, device: str | None = None) -> list[str]:
    """Why the machine a record (or `harness env`) describes was busy: [] when it was not, or is unknown.

    Busy means: the 1-minute load average exceeds the host's cores (more runnable threads than
    cores: the run had to share them; a run's own threads count, so a run that fills every core
    is not flagged by itself); another process was computing on the GPU the run used (on any GPU
    when the device is not known); for a run on a GPU, another GPU of the host was computing too (its
    processes, or its utilisation where NVML lists none): they share the host's power and cooling, and
    clocks move with them; or the run was timed with the host shared (`measure.share_host`) or without the
    host's timing lock. Records made before this was captured say nothing. `env`: a record's, or what
    `capture()` gives.
    """
    env = Environment.of(env)
    out = []
    load, cores = env.load_average, _cores(env)
    if load and cores and load[0] is not None and float(load[0]) > cores:
        out.append(f"load average {float(load[0]):.1f} exceeds the {cores} cores")
    return out + _gpu_reasons(env, _gpu_indices(env, device)) + _isolation_reasons(env.isolation)


def _gpu_reasons(env: Environment, wanted: list[str] | None) -> list[str]:
    """Other work on the run's GPUs (`wanted`; None: any), and, for a GPU run, on the host's other GPUs."""
    out = []
    procs = env.gpu_processes or {}
    for index, found in sorted(procs.items()):
        if found and (wanted is None or str(index) in wanted):
            out.append(f"{len(found)} other process(es) computing on GPU {index}")
        elif found and wanted:
            out.append(f"{len(found)} process(es) computing on the host's GPU {index}, beside this run's GPU")
    if wanted and env.gpu_utilization:
        for index, pct in sorted(env.gpu_utilization.items()):
            if str(index) not in wanted and not procs.get(str(index)) and pct is not None and pct > BUSY_GPU_PCT:
                out.append(f"the host's GPU {index} was {pct:.0f}% busy beside this run's GPU")
    return out


def _isolation_reasons(isolation: Isolation | None) -> list[str]:
    """A run timed without the host to itself (harness.worker.hostlock): shared on purpose, or unlocked."""
    if isolation is None:
        return []
    if isolation.mode == "shared":
        return ["timed with the host shared (measure.share_host): other sessions may have timed runs beside it"]
    if isolation.mode == "unlocked":
        return [f"timed without the host's timing lock ({isolation.reason or 'it could not be taken'})"]
    return []


def environment_warnings(env: Environment | Mapping | None = None) -> list[str]:
    """Warnings about this machine's state: a busy CPU or GPU, throttling, debug settings, two TensorFlow builds
    installed, CPU governor."""

    env = Environment.of(env or capture())
    out = [f"busy machine: {reason}: runs started now share it, and their figures will vary with that load"
           for reason in busy_reasons(env)]
    out += _throttle_warnings()
    if variables().cuda_launch_blocking:
        out.append("CUDA_LAUNCH_BLOCKING=1 serializes every kernel launch: timings will not reflect normal use")
    if hasattr(sys, "gettotalrefcount"):
        out.append("this Python is a debug build: host-side overhead is inflated")
    tensorflows = tensorflow_distributions()
    if len(tensorflows) > 1:
        out.append(f"{len(tensorflows)} TensorFlow distributions are installed ({', '.join(tensorflows)}): the one "
                   "installed last overwrote the others' files; rebuild the environment with one "
                   "(scripts/make-env.sh, `make setup`)")
    governor = env.cpu_governor
    if governor and governor != "performance":
        out.append(f"CPU frequency governor is {governor!r}, not 'performance': host-bound figures may vary")
    return out
