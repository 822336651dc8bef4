"""The neutral `precision` values mapped to torch: operand dtypes, autocast, GradScaler, TF32 flags.

TF32 is set explicitly for every run (torch defaults matmul off and cuDNN on): on for `tf32`,
off for everything else, so an fp32 result never silently uses tensor-core rounding.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from backends.torch import compat
from backends.torch.device import compute_capability
from harness.errors import Unsupported
from harness.seam.backend import TF32_ON_CPU

#: gemm operand dtype per precision (tf32 multiplies float32 tensors with TF32 tensor cores).
GEMM_DTYPE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
#: autocast dtype per training precision (None: plain float32 training).
AUTOCAST_DTYPE = {"fp32": None, "tf32": None, "amp_fp16": "float16", "amp_bf16": "bfloat16"}


def require_tf32(device) -> None:
    """Raise Unsupported where the device has no TF32 (the CPU; GPUs before compute capability 8.0)."""
    if device.type != "cuda":
        raise Unsupported(TF32_ON_CPU)
    cc = compute_capability(device)
    if cc is not None and cc < (8, 0):
        raise Unsupported(
            f"TF32 is a tensor-core format of NVIDIA Ampere and newer GPUs (compute capability 8.0+); "
            f"this GPU is {cc[0]}.{cc[1]}"
        )


def apply_tf32(precision: str, device) -> str:
    """Set TF32 on exactly when precision is `tf32` (checking the device has it); return the flags as set."""
    enabled = precision == "tf32"
    if enabled:
        require_tf32(device)
    return compat.set_tf32(enabled)


def torch_dtype(name: str):
    """torch.float32 / float16 / bfloat16 from its name."""
    return getattr(torch, name)


@dataclass(frozen=True)
class Amp:
    """How a step runs mixed precision: the autocast context to enter (a null one in float32), the GradScaler."""

    autocast: Callable[[], Any] = contextlib.nullcontext
    scaler: Any = None


def mixed_precision(precision: str, dev, api: dict) -> Amp:
    """TF32 set explicitly from the precision, autocast and (amp_fp16) a GradScaler; the API into `api`."""
    flags = apply_tf32(precision, dev)
    amp_name = AUTOCAST_DTYPE[precision]
    if amp_name is None:
        api["precision"] = flags
        return Amp()
    amp_dtype = torch_dtype(amp_name)
    compat.autocast(dev.type, amp_dtype)  # Unsupported where this torch would switch it off
    scaler = None
    api["precision"] = f"torch.autocast({dev.type}, {amp_name})"
    if precision == "amp_fp16":
        scaler, scaler_api = compat.grad_scaler(dev.type)
        api["precision"] += f" + {scaler_api}"
    api["precision"] += f"; {flags}"

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=amp_dtype)

    return Amp(autocast, scaler)
