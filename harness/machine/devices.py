"""Neutral device names (`auto`, `cpu`, `cuda:N`) and their parsing."""

from __future__ import annotations

import re

from harness.errors import InputError

_GPU = re.compile(r"^(?:cuda|gpu)(?::(\d+))?$", re.IGNORECASE)


def normalize_device(name: str) -> str:
    """Return the neutral form of a device name: `auto`, `cpu` or `cuda:N`; raise InputError otherwise."""
    text = str(name).strip()
    low = text.lower()
    if low in ("auto", "cpu"):
        return low
    if low.startswith("/") or low.startswith("device:"):
        # TensorFlow spellings such as /GPU:0 or /device:GPU:0
        low = low.split("device:")[-1].lstrip("/")
    match = _GPU.match(low)
    if match:
        return f"cuda:{int(match.group(1) or 0)}"
    if low in ("cpu:0", "/cpu:0"):
        return "cpu"
    raise InputError(
        f"unknown device {text!r}: expected 'auto', 'cpu', 'cuda:N' or 'gpu:N' (N a GPU index)",
        field="devices",
    )


def gpu_index(device: str) -> int | None:
    """The GPU index of a neutral `cuda:N` device, or None for `cpu`/`auto`."""
    if device.startswith("cuda:"):
        return int(device.split(":", 1)[1])
    return None
