"""Every difference between torch releases (2.0.1 through 2.14) that the backend meets.

Each branch is named by the release that needs it. The worker's side of the backend: it imports torch
(the parent process classifies torch's errors without it: backends.torch.out_of_memory_errors).
"""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any, Callable

import torch
import torch.utils.checkpoint

from harness.errors import Unsupported


def torch_version() -> tuple[int, int]:
    """(major, minor) of the imported torch (`2.14.1+cu130` -> (2, 14))."""
    match = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


# --- precision -------------------------------------------------------------------------------


def set_tf32(enabled: bool) -> str:
    """Turn TF32 on or off for matmul and cuDNN convolutions, explicitly; return the settings as read back.

    torch's defaults differ (matmul off, cuDNN on), so both flags are always written. The legacy
    `allow_tf32` flags exist in every release from 2.0 to 2.14 (2.9 added `fp32_precision`, which
    follows them); `set_float32_matmul_precision` also decides whether the CPU's oneDNN may
    round fp32 matmul inputs, so fp32 asks for "highest".
    """
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    return (
        f"torch.backends.cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
        f"torch.backends.cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, "
        f"torch.set_float32_matmul_precision({torch.get_float32_matmul_precision()!r})"
    )


def autocast(device_type: str, dtype: Any):
    """A `torch.autocast` context for device_type and dtype; Unsupported where this torch would disable it.

    torch 2.0-2.1: CPU autocast knows only bfloat16 and turns itself off, with a warning, for
    float16 (CPU float16 autocast arrived in 2.2). The context says whether it stayed enabled.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        context = torch.autocast(device_type=device_type, dtype=dtype)
    if not getattr(context, "_enabled", True):
        said = "; ".join(str(w.message).splitlines()[0] for w in caught)
        raise Unsupported(
            f"torch {torch.__version__} has no {device_type} autocast to {dtype}" + (f" ({said})" if said else "")
        )
    return context


def grad_scaler(device_type: str) -> tuple[Any, str]:
    """A GradScaler for float16 autocast on device_type, and the API named as used.

    torch >= 2.3: `torch.amp.GradScaler(device)`, CUDA and CPU. torch 2.0-2.2: only
    `torch.cuda.amp.GradScaler()`, so a CPU float16 run is unsupported there.
    """
    if torch_version() >= (2, 3):
        return torch.amp.GradScaler(device_type), f"torch.amp.GradScaler({device_type!r})"
    if device_type == "cuda":
        return torch.cuda.amp.GradScaler(), "torch.cuda.amp.GradScaler()"
    raise Unsupported(f"torch {torch.__version__} has no GradScaler for the {device_type} (torch.amp.GradScaler arrived in 2.3)")


def matmul_supported(dtype: Any, device: Any) -> str | None:
    """Why torch cannot multiply `dtype` matrices on `device`, or None if it can.

    torch 2.0.x has no float16 addmm/bmm on the CPU ("addmm_impl_cpu_" not implemented for 'Half');
    later releases added it. A tiny probe answers for every release instead of a version table.
    """
    if device.type != "cpu":
        return None
    try:
        x = torch.ones((2, 2), dtype=dtype)
        torch.matmul(x, x)
        torch.matmul(x.unsqueeze(0), x.unsqueeze(0))
    except RuntimeError as exc:
        return f"torch {torch.__version__} has no {dtype} matmul on the CPU: {str(exc).splitlines()[0]}"
    return None


# --- execution -------------------------------------------------------------------------------


def compile_unsupported_reason() -> str | None:
    """Why `torch.compile` cannot run in this Python, or None.

    torch 2.0.x: dynamo refuses Python 3.11+ ("Python 3.11+ not yet supported"); 2.1 added 3.11.
    Later releases refuse Pythons newer than they know, through the same check.
    """
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (it arrived in 2.0)"
    if torch_version() < (2, 1) and sys.version_info >= (3, 11):
        return (
            f"torch {torch.__version__} has no torch.compile on Python "
            f"{sys.version_info.major}.{sys.version_info.minor} (3.11 support arrived in torch 2.1)"
        )
    try:  # imported here, in a try: a release may not have Dynamo's own check where 2.0-2.14 keep it
        from torch._dynamo.eval_frame import check_if_dynamo_supported
    except ImportError:
        return None
    try:
        check_if_dynamo_supported()
    except RuntimeError as exc:
        return f"torch {torch.__version__}: {exc}"
    return None


def torch_compile(fn: Callable, mode: str) -> Callable:
    """`torch.compile(fn, mode=mode)`; Unsupported where this torch/Python pair has no compiler."""
    reason = compile_unsupported_reason()
    if reason:
        raise Unsupported(reason)
    return torch.compile(fn, mode=mode)


def dynamo_config() -> Any:
    """torch._dynamo.config where this torch has Dynamo (2.0+; a build without it has no torch.compile either),
    else None."""
    try:  # imported here, in a try: Dynamo is optional in a torch build
        import torch._dynamo as dynamo
    except ImportError:
        return None
    return dynamo.config


def checkpoint(fn: Callable, *args: Any, preserve_rng_state: bool = True) -> Any:
    """Activation checkpointing of fn(*args), non-reentrant (recomputed during backward).

    `use_reentrant` is always passed: torch 2.1+ warns when it is left out, and the reentrant
    variant (the old default) breaks with inputs that need no grad and under torch.compile.
    """
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=preserve_rng_state)


# --- the build ---------------------------------------------------------------------------------


def cpu_capability() -> str | None:
    """The CPU kernels torch dispatches to (`AVX512`); torch.backends.cpu arrived in 2.1."""
    backend = getattr(torch.backends, "cpu", None)
    getter = getattr(backend, "get_cpu_capability", None)
    return getter() if getter else None
