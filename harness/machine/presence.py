"""Whether a GPU a run asks for is there, known before any worker starts (NVML; no framework import)."""

from __future__ import annotations

from pathlib import Path

from harness.machine import nvml
from harness.machine.variables import variables


def visible_gpus() -> int | None:
    """How many NVIDIA GPUs a worker would see (NVML's, narrowed by CUDA_VISIBLE_DEVICES); None where it
    cannot be told (NVML absent though the driver's device files are there)."""
    if nvml.nvml() is None:
        return None if Path("/dev/nvidia0").exists() else 0
    count = len(nvml.gpus())
    visible = variables().cuda_visible_devices
    if visible is not None:
        count = min(count, len([e for e in visible.split(",") if e.strip() and e.strip() != "-1"]))
    return count


#: Every reason missing_device_reason gives contains this (a resumed session runs such runs again).
MISSING_DEVICE = "this machine has"


def missing_device_reason(device: str) -> str | None:
    """Why a neutral device (`cuda:N`) cannot run on this machine, as `harness env` would show it; None
    for `cpu`, `auto`, a GPU that is there, or where that cannot be told."""
    if not device.startswith("cuda:"):
        return None
    index = int(device.split(":", 1)[1])
    count = visible_gpus()
    if count is None or index < count:
        return None
    if count == 0:
        why = "no NVIDIA driver / NVML" if nvml.nvml() is None else "no GPU visible (CUDA_VISIBLE_DEVICES)"
        return f"{device}: {MISSING_DEVICE} no GPU a worker could use ({why}; `harness env` shows it)"
    return f"{device}: {MISSING_DEVICE} {count} visible GPU(s), cuda:0 to cuda:{count - 1} (`harness env` lists them)"
