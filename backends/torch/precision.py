"""The neutral `precision` values mapped to torch: operand dtypes, autocast, loss scaling, TF32 flags.

amp_fp16's `loss_scale: dynamic` is torch's GradScaler, as torch users get it: its `step` reads the inf/NaN check
of the gradients on the host every step (a device synchronization). `loss_scale: static` multiplies the loss by the
constant STATIC_LOSS_SCALE and the gradients by its inverse before optimizer.step(): no inf check, no host sync.

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
from harness.workloads.training import STATIC_LOSS_SCALE

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
    """How a step runs mixed precision: the autocast context to enter (a null one in float32), the GradScaler
    (dynamic loss scaling) or the constant of static loss scaling."""

    autocast: Callable[[], Any] = contextlib.nullcontext
    scaler: Any = None
    #: loss_scale: static, the constant scale (None: no static scaling)
    static_scale: float | None = None

    def loss_scale(self) -> float | None:
        """The loss scale now: GradScaler's current scale, the static constant, or None without scaling."""
        if self.scaler is not None:
            return float(self.scaler.get_scale())
        return self.static_scale


def unscale_gradients(parameters, scale: float) -> None:
    """Static loss scaling's unscale: every gradient times 1/scale, on the device (torch._foreach_mul_ where this
    torch has it), with no inf check and nothing read on the host."""
    grads = [p.grad for p in parameters if p.grad is not None]
    foreach_mul = getattr(torch, "_foreach_mul_", None)
    if foreach_mul is not None:
        foreach_mul(grads, 1.0 / scale)
    else:
        for grad in grads:
            grad.mul_(1.0 / scale)


STATIC_API = (f"static loss scaling: loss x {STATIC_LOSS_SCALE:g}, gradients x 1/{STATIC_LOSS_SCALE:g} "
              "(torch._foreach_mul_) before optimizer.step(); no inf check, no host sync")
DYNAMIC_API = "its step() reads the gradients' inf/NaN check on the host every step (a device sync)"


def mixed_precision(precision: str, dev, api: dict, loss_scale: str = "dynamic") -> Amp:
    """TF32 set explicitly from the precision, autocast and (amp_fp16) a GradScaler (`loss_scale: dynamic`) or a
    constant scale (`static`); the API into `api`."""
    flags = apply_tf32(precision, dev)
    amp_name = AUTOCAST_DTYPE[precision]
    if amp_name is None:
        api["precision"] = flags
        return Amp()
    amp_dtype = torch_dtype(amp_name)
    compat.autocast(dev.type, amp_dtype)  # Unsupported where this torch would switch it off
    scaler, static = None, None
    api["precision"] = f"torch.autocast({dev.type}, {amp_name})"
    if precision == "amp_fp16" and loss_scale == "static":
        static = STATIC_LOSS_SCALE
        api["precision"] += f" + {STATIC_API}"
    elif precision == "amp_fp16":
        scaler, scaler_api = compat.grad_scaler(dev.type)
        api["precision"] += f" + {scaler_api} (dynamic loss scaling: {DYNAMIC_API})"
    api["precision"] += f"; {flags}"

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=amp_dtype)

    return Amp(autocast, scaler, static)
