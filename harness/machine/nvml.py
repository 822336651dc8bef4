"""Thin, failure-tolerant access to NVML (nvidia-ml-py). Absent NVML means None, never an error."""

from __future__ import annotations

import threading

from harness.machine.variables import variables

_lock = threading.Lock()
_state: dict = {"ok": None}


def nvml():
    """The initialized pynvml module, or None where NVML (or the driver) is absent."""
    with _lock:
        if _state["ok"] is None:
            try:
                import pynvml  # optional (nvidia-ml-py), and only where a GPU is asked about

                pynvml.nvmlInit()
                _state["ok"] = pynvml
            except Exception:
                _state["ok"] = False
        return _state["ok"] or None


def _text(value) -> str:
    # nvmlDeviceGetName returns str in current releases, bytes in old ones
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_index(cuda_index: int) -> int:
    """The NVML index of CUDA device N, honouring CUDA_VISIBLE_DEVICES.

    The runner sets CUDA_DEVICE_ORDER=PCI_BUS_ID in every worker, so CUDA and NVML count GPUs in
    the same order; CUDA_VISIBLE_DEVICES may still remap them (integers only; UUIDs are looked up).
    """
    visible = variables().cuda_visible_devices
    if not visible:
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index >= len(entries):
        return cuda_index
    entry = entries[cuda_index]
    if entry.isdigit():
        return int(entry)
    lib = nvml()
    if lib is not None:
        for i in range(lib.nvmlDeviceGetCount()):
            if _text(lib.nvmlDeviceGetUUID(lib.nvmlDeviceGetHandleByIndex(i))).startswith(entry):
                return i
    return cuda_index


def gpus() -> list[dict]:
    """Every GPU NVML sees: index, name, memory, uuid, pci bus id; [] without NVML."""
    lib = nvml()
    if lib is None:
        return []
    out = []
    try:
        for i in range(lib.nvmlDeviceGetCount()):
            h = lib.nvmlDeviceGetHandleByIndex(i)
            mem = lib.nvmlDeviceGetMemoryInfo(h)
            entry = {"index": i, "name": _text(lib.nvmlDeviceGetName(h)), "memory_total_bytes": int(mem.total),
                     "memory_used_bytes": int(mem.used)}
            for key, fn in (("uuid", "nvmlDeviceGetUUID"),):
                try:
                    entry[key] = _text(getattr(lib, fn)(h))
                except Exception:
                    pass
            try:
                entry["pci_bus_id"] = _text(lib.nvmlDeviceGetPciInfo(h).busId)
            except Exception:
                pass
            out.append(entry)
    except Exception:
        return out
    return out


def driver_version() -> str | None:
    """The NVIDIA driver version, or None."""
    lib = nvml()
    if lib is None:
        return None
    try:
        return _text(lib.nvmlSystemGetDriverVersion())
    except Exception:
        return None
