"""A training workload's optimizer (harness.workloads.training.OptimizerSpec) as torch.optim builds it.

`sgd` is torch.optim.SGD; `adamw` is torch.optim.AdamW, its weight decay on every parameter (`decay: all`) or on
the weights of two or more dimensions only (`decay: matrices`: no decay of biases or norm scales), in two
parameter groups. Both take torch's default implementation (foreach on CUDA, a for-loop over the parameters on
the CPU), as a user who does not ask gets it; AdamW's record names it. Under execution compiled torch.compile
traces that one and fuses it itself (a small MLP's step with a fused=True AdamW took 95 s to compile on 2 CPU
cores, against 13 s with torch's default, torch 2.14).
"""

from __future__ import annotations

import torch

from backends.torch.precision import Amp
from harness.workloads.training import OptimizerSpec


def build_optimizer(spec: OptimizerSpec, model, p, dev, amp: Amp, api: dict):
    """The optimizer `spec` names over the model's parameters; its API and grad_accum's into `api`."""
    if spec.name == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
        api["optimizer"] = f"torch.optim.SGD(lr={spec.lr}, momentum={spec.momentum})"
    else:
        optimizer, api["optimizer"] = adamw(spec, model, dev, capturable=p.execution == "cuda_graph")
    if amp.scaler is not None:
        # GradScaler.step reads its inf/NaN check on the host once a step (docs/execution.md); a fused
        # SGD that takes the check as a device tensor diverged in eager mode on an H200 (torch 2.11)
        api["optimizer"] += "; GradScaler.step syncs the host once a step"
    elif amp.static_scale is not None:
        api["optimizer"] += f"; gradients unscaled by the static loss scale {amp.static_scale:g} before step()"
    api["grad_accum"] = (
        f"{p.grad_accum} micro-batches of {p.batch_size} in a Python loop, loss / {p.grad_accum}, one optimizer.step()"
        if p.grad_accum > 1
        else "none (1 micro-batch per optimizer step)"
    )
    return optimizer


def adamw(spec: OptimizerSpec, model, dev, *, capturable: bool):
    """torch.optim.AdamW with the spec's hyperparameters and decay groups, and its API line. `foreach` is set to
    what torch's default resolves to (on for CUDA tensors), so the record can name it; `capturable` (its step
    count kept on the device) for a whole-step CUDA graph, which cannot capture a host-side count."""
    params = [t for t in model.parameters() if t.requires_grad]
    if spec.decay == "matrices":
        decayed = [t for t in params if t.dim() >= 2]
        kept = [t for t in params if t.dim() < 2]
        groups = [{"params": decayed, "weight_decay": spec.weight_decay}, {"params": kept, "weight_decay": 0.0}]
        decay = (f"weight_decay={spec.weight_decay} on the {len(decayed)} weights of 2+ dims, 0 on the other "
                 f"{len(kept)} parameters")
    else:
        groups = [{"params": params, "weight_decay": spec.weight_decay}]
        decay = f"weight_decay={spec.weight_decay} on every parameter"
    foreach = dev.type == "cuda"
    extra = {"capturable": True} if capturable else {}
    optimizer = torch.optim.AdamW(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps, foreach=foreach, **extra)
    implementation = ("multi-tensor kernels, torch's default on CUDA" if foreach
                      else "a for-loop over the parameters, torch's default on the CPU")
    api = (f"torch.optim.AdamW(lr={spec.lr}, betas={tuple(spec.betas)}, eps={spec.eps}, foreach={foreach}"
           f"{', capturable=True' if capturable else ''}); {decay}; {implementation}")
    return optimizer, api


def momentum_buffers_ready(optimizer, api: dict) -> None:
    """SGD's momentum buffers, created as zeros before the whole step is compiled. SGD creates them in its
    first step, so torch.compile would trace the step twice, without optimizer state and then with it, and
    the second compile (14-19 s of a ResNet-50 step on an H200) would land in the warm-up, not in the first
    step that reports the compile. With dampening 0 a zero buffer gives the first step momentum * 0 + grad,
    the gradient, as SGD's own first step does: the training is the same. Other optimizers are left as they
    are (torch.compile traces AdamW's lazily made state in its first call)."""
    if not isinstance(optimizer, torch.optim.SGD):
        return
    groups = [group for group in optimizer.param_groups if group["momentum"]]  # momentum 0 keeps no buffers
    for group in groups:
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    if groups:
        api["optimizer"] += "; momentum buffers created (zeros) before compiling, so the step compiles once"
